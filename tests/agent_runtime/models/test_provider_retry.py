"""The retry loop every provider driver shares: the calls it must not repeat
(the rules themselves are tested in tests/agent_runtime/test_http_retry.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from agent_runtime.models.base import ModelError
from agent_runtime.models.retry import (
    RetryPolicy,
    TextRelay,
    call_with_retries,
    error_body_details,
)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def test_a_retry_after_beyond_the_limit_fails_at_once_with_the_reason() -> None:
    calls = 0

    async def throttled() -> str:
        nonlocal calls
        calls += 1
        raise ModelError("rate_limited", "HTTP 429 rate_limited: slow down", retryable=True,
                         retry_after=3600)

    with pytest.raises(ModelError, match="retry after 3600s") as failed:
        asyncio.run(call_with_retries(throttled, policy=RetryPolicy(), timeout_seconds=None,
                                      relay=TextRelay(None), translate=lambda error: None))
    assert calls == 1
    assert failed.value.code == "rate_limited"


def test_a_call_that_already_showed_text_is_not_repeated() -> None:
    shown: list[str] = []
    relay = TextRelay(shown.append)
    calls = 0

    async def breaks_midway() -> str:
        nonlocal calls
        calls += 1
        relay("partial ")
        raise ModelError("connection_error", "connection reset", retryable=True)

    with pytest.raises(ModelError, match="connection reset"):
        asyncio.run(call_with_retries(breaks_midway, policy=RetryPolicy(), timeout_seconds=None,
                                      relay=relay, translate=lambda error: None))
    assert calls == 1
    assert shown == ["partial "]


def test_an_exception_that_is_not_a_provider_failure_propagates_unchanged() -> None:
    async def bug() -> str:
        raise KeyError("choices")

    with pytest.raises(KeyError):
        asyncio.run(call_with_retries(bug, policy=RetryPolicy(), timeout_seconds=None,
                                      relay=TextRelay(None), translate=lambda error: None))


@pytest.mark.parametrize(("body", "expected"), [
    ({"error": {"message": "bad model", "type": "invalid_request_error",
                "code": "model_not_found"}}, ("model_not_found", "bad model")),
    ({"message": "bad model", "type": "invalid_request_error", "code": None},
     ("invalid_request_error", "bad model")),
    ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
     ("overloaded_error", "Overloaded")),
    ({"error": "model 'x' not found"}, (None, "model 'x' not found")),
    ({"detail": "Not Found"}, (None, "Not Found")),
    ("upstream timed out", (None, "upstream timed out")),
    (None, (None, None)),
])
def test_error_bodies_in_the_shapes_providers_use(body: object,
                                                  expected: tuple[str | None, str | None]) -> None:
    assert error_body_details(body) == expected
