"""What every HTTP driver does with `limits.providerTimeoutMs`: a provider that
does not answer in time fails the run with a `timeout` model error, once (a
timeout is not retried: the limit is the user's, and a repeat would multiply it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_provider_server import PROMPT, FakeProviderServer, driver_run, hang

from agent_runtime import RunStatus

Config = Callable[[FakeProviderServer], dict[str, Any]]
DRIVERS: dict[str, tuple[Config, dict[str, str], dict[str, str]]] = {
    # driver: (its provider config, the manifest's model, the environment it reads)
    "openai-compatible": (
        lambda server: {"providers": {"local": {"driver": "openai-compatible",
                                                "baseURL": f"{server.url}/v1"}}},
        {"provider": "local", "model": "test-model"}, {}),
    "anthropic": (
        lambda server: {"providers": {"claude": {"driver": "anthropic", "baseURL": server.url,
                                                 "apiKey": {"env": "CLAUDE_TEST_KEY"}}}},
        {"provider": "claude", "model": "claude-test"}, {"CLAUDE_TEST_KEY": "test-key"}),
    "bedrock": (
        lambda server: {"providers": {"aws": {"driver": "bedrock", "region": "us-east-1",
                                              "baseURL": server.url}}},
        {"provider": "aws", "model": "anthropic.claude-test-v1:0"},
        {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
         "AWS_EC2_METADATA_DISABLED": "true"}),
}


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_a_timeout_fails_the_run_without_retrying(
        driver: str, server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Any) -> None:
    config, model, environment = DRIVERS[driver]
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    # No AWS profile or config of the machine's may take part.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK"):
        monkeypatch.delenv(name, raising=False)
    # The server never answers in the test's life; the limit is long enough for a
    # loaded machine to send the request, so the one request is always seen.
    server.add(hang(600))
    run = driver_run(config(server))
    result = run.run(PROMPT, model=model, limits={"providerTimeoutMs": 2000})

    assert result.status is RunStatus.FAILED
    assert result.error is not None
    assert result.error["type"] == "model_error"
    assert result.error["details"] == {"code": "timeout"}
    assert "2s" in result.error["message"]
    assert len(server.requests) == 1
    record = run.store.load_run(result.run_id)
    assert record is not None and record.status is RunStatus.FAILED
