"""What every HTTP driver does the same way. Settings of a `providers` entry:
`headers` (each an env reference) reach the provider's endpoint with every
request, and an unset variable is refused naming the header before a run
exists; a setting only some drivers use is refused by name on the others,
never ignored. Calls: `limits.providerTimeoutMs` fails a call that takes
longer with a `timeout` model error, once (the limit is the user's: a repeat
would multiply it); a 429 is retried after the wait its Retry-After names."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from fake_provider_server import (
    FakeProviderServer,
    Reply,
    driver_run,
    hang,
    json_reply,
    no_real_aws,
)

from agent_runtime import RunStatus
from agent_runtime.config import parse_config
from agent_runtime.errors import ConfigError
from agent_runtime.models import DRIVER_MODULES
from agent_runtime.models.retry import RetryPolicy

PROMPT = {"id": "ask", "type": "prompt", "prompt": "Say hello.", "includeInFinalOutput": True}
MODEL = {"provider": "house", "model": "test-model"}
HEADERS = {"X-Tenant": {"env": "TENANT_HEADER"}, "X-Route": {"env": "ROUTE_HEADER"}}


def openai_reply() -> Reply:
    return json_reply({"id": "c1", "object": "chat.completion", "created": 1,
                       "model": "test-model",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": "Hello."}}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                 "total_tokens": 5}})


def anthropic_reply() -> Reply:
    return json_reply({"id": "m1", "type": "message", "role": "assistant", "model": "test-model",
                       "content": [{"type": "text", "text": "Hello."}],
                       "stop_reason": "end_turn", "stop_sequence": None,
                       "usage": {"input_tokens": 3, "output_tokens": 2}})


def bedrock_reply() -> Reply:
    return json_reply({"output": {"message": {"role": "assistant",
                                              "content": [{"text": "Hello."}]}},
                       "stopReason": "end_turn",
                       "usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5},
                       "metrics": {"latencyMs": 1}})


def google_reply() -> Reply:
    return json_reply({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hello."}]},
                                       "finishReason": "STOP"}],
                       "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2,
                                         "totalTokenCount": 5}})


def cohere_reply() -> Reply:
    return json_reply({"id": "c1", "finish_reason": "COMPLETE",
                       "message": {"role": "assistant",
                                   "content": [{"type": "text", "text": "Hello."}]},
                       "usage": {"tokens": {"input_tokens": 3, "output_tokens": 2}}})


# driver -> (provider entry without headers, given the server's URL; its reply)
DRIVERS: dict[str, tuple[Any, Any]] = {
    "openai-compatible": (lambda url: {"baseURL": f"{url}/v1",
                                       "apiKey": {"env": "PROVIDER_TEST_KEY"}}, openai_reply),
    "openai": (lambda url: {"baseURL": f"{url}/v1", "apiKey": {"env": "PROVIDER_TEST_KEY"}},
               openai_reply),
    "anthropic": (lambda url: {"baseURL": url, "apiKey": {"env": "PROVIDER_TEST_KEY"}},
                  anthropic_reply),
    "bedrock": (lambda url: {"baseURL": url, "region": "us-east-1"}, bedrock_reply),
    "google": (lambda url: {"baseURL": f"{url}/v1beta", "apiKey": {"env": "PROVIDER_TEST_KEY"}},
               google_reply),
    "xai": (lambda url: {"baseURL": f"{url}/v1", "apiKey": {"env": "PROVIDER_TEST_KEY"}},
            openai_reply),
    "groq": (lambda url: {"baseURL": f"{url}/openai/v1", "apiKey": {"env": "PROVIDER_TEST_KEY"}},
             openai_reply),
    "cohere": (lambda url: {"baseURL": url, "apiKey": {"env": "PROVIDER_TEST_KEY"}},
               cohere_reply),
}


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A key for the key-based drivers; fake AWS credentials and no way to find real ones."""
    monkeypatch.setenv("PROVIDER_TEST_KEY", "test-key")
    no_real_aws(monkeypatch, tmp_path)


def provider(driver: str, server: FakeProviderServer, *, headers: bool = True) -> dict[str, Any]:
    entry, _ = DRIVERS[driver]
    return {"providers": {"house": {"driver": driver, **entry(server.url),
                                    **({"headers": HEADERS} if headers else {})}}}


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_headers_reach_the_provider_with_the_request(
        driver: str, server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENANT_HEADER", "acme")
    monkeypatch.setenv("ROUTE_HEADER", "eu-west")
    server.add(DRIVERS[driver][1]())
    result = driver_run(provider(driver, server)).run(
        PROMPT, model={"provider": "house", "model": "test-model"})

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello."
    [request] = server.requests
    assert (request.headers["x-tenant"], request.headers["x-route"]) == ("acme", "eu-west")


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_an_unset_header_variable_is_refused_before_a_run_naming_the_header(
        driver: str, server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENANT_HEADER", "acme")
    monkeypatch.delenv("ROUTE_HEADER", raising=False)
    run = driver_run(provider(driver, server))
    with pytest.raises(ConfigError) as refused:
        run.run(PROMPT, model={"provider": "house", "model": "test-model"})

    assert "providers.house.headers.X-Route" in refused.value.reason
    assert "ROUTE_HEADER, which is not set" in refused.value.reason
    assert run.store.list_runs().runs == []
    assert server.requests == []


@pytest.mark.parametrize(("driver", "field", "value", "users"), [
    ("anthropic", "includeUsage", True, "openai and openai-compatible"),
    ("bedrock", "includeUsage", False, "openai and openai-compatible"),
    ("openai", "region", "us-east-1", "bedrock"),
    ("anthropic", "region", "us-east-1", "bedrock"),
])
def test_a_setting_the_driver_does_not_use_is_refused_by_name(
        driver: str, field: str, value: Any, users: str) -> None:
    entry = {"driver": driver, "apiKey": {"env": "PROVIDER_TEST_KEY"}, field: value}
    if driver == "bedrock":
        del entry["apiKey"]
    with pytest.raises(ConfigError) as refused:
        parse_config({"version": "1.0", "providers": {"house": entry}}, source="cfg.yaml")
    assert refused.value.field == f"providers.house.{field}"
    assert refused.value.reason == (f"only the {users} driver uses {field}; the {driver} "
                                    "driver would ignore it: remove it")


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_a_timeout_fails_the_run_without_retrying(
        driver: str, server: FakeProviderServer) -> None:
    # The server never answers in the test's life; the limit is long enough for a
    # loaded machine to send the request, so the one request is always seen.
    server.add(hang(600))
    run = driver_run(provider(driver, server, headers=False))
    result = run.run(PROMPT, model=MODEL, limits={"providerTimeoutMs": 2000})

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["type"] == "model_error"
    assert result.error["details"] == {"code": "timeout"}
    assert "providerTimeoutMs" in result.error["message"]  # names the limit it hit
    assert len(server.requests) == 1
    record = run.store.load_run(result.run_id)
    assert record is not None and record.status is RunStatus.FAILED


@pytest.mark.parametrize("driver", ["anthropic", "openai", "openai-compatible", "google", "xai",
                                    "groq", "cohere"])
def test_a_429_is_retried_after_the_retry_after_it_names(
        driver: str, server: FakeProviderServer) -> None:
    server.add(json_reply({"error": {"message": "Rate limit reached", "type": "rate_limit"}},
                          status=429, headers={"Retry-After": "3"}),
               DRIVERS[driver][1]())
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    config = provider(driver, server, headers=False)
    adapter = importlib.import_module(DRIVER_MODULES[driver]).create_adapter(
        "house", parse_config({"version": "1.0", **config}, source="test"),
        retry=RetryPolicy(sleep=record))
    result = driver_run(config, models={"house": adapter}).run(PROMPT, model=MODEL)

    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "Hello."
    assert len(server.requests) == 2
    assert waits == [3.0]
