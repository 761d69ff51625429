"""The retry rules every outbound HTTP call shares (model providers and webhook
steps): which answers are repeated, Retry-After in its forms, bounded backoff."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from agent_runtime.http_retry import Backoff, retry_after_seconds, status_retryable
from agent_runtime.models.retry import RetryPolicy
from agent_runtime.steps.webhook import WEBHOOK_BACKOFF

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("headers", "expected"), [
    ({"Retry-After": "3"}, 3.0),
    ({"retry-after": "0.5"}, 0.5),
    ({"Retry-After": format_datetime(NOW + timedelta(seconds=7), usegmt=True)}, 7.0),
    ({"Retry-After": format_datetime(NOW - timedelta(seconds=7), usegmt=True)}, 0.0),
    # "-0000" is UTC without a claimed zone, never the machine's local time
    ({"Retry-After": "Fri, 01 May 2026 12:00:09 -0000"}, 9.0),
    ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
    ({"Retry-After": "soon"}, None),
    ({}, None),
    (None, None),
])
def test_retry_after_in_seconds_as_a_date_or_in_milliseconds(
        headers: dict[str, str] | None, expected: float | None) -> None:
    assert retry_after_seconds(headers, now=NOW.timestamp) == expected


@pytest.mark.parametrize(("status", "retried"), [
    (408, True), (425, True), (429, True), (500, True), (503, True), (599, True),
    (200, False), (301, False), (400, False), (404, False), (409, False), (600, False),
])
def test_only_timeouts_throttling_and_server_errors_are_repeated(
        status: int, retried: bool) -> None:
    assert status_retryable(status) is retried


def test_backoff_doubles_up_to_its_cap_and_keeps_at_least_half() -> None:
    lowest = Backoff(base_delay=1, max_delay=4, uniform=lambda low, high: low)
    highest = Backoff(base_delay=1, max_delay=4, uniform=lambda low, high: high)
    assert [lowest.delay(n, None) for n in (1, 2, 3, 4, 9)] == [0.5, 1, 2, 2, 2]
    assert [highest.delay(n, None) for n in (1, 2, 3, 4, 9)] == [1, 2, 4, 4, 4]


def test_a_server_asked_wait_is_kept_up_to_the_limit_and_refused_beyond_it() -> None:
    backoff = Backoff(max_retry_after=60)
    assert backoff.delay(1, 0.0) == 0.0
    assert backoff.delay(3, 60.0) == 60.0
    assert backoff.delay(1, 60.5) is None
    assert backoff.refusal(3600) == ("the server asked to retry after 3600s, more than "
                                     "the 60s this runtime waits")


def test_providers_and_webhooks_share_the_rules_with_their_own_numbers() -> None:
    assert isinstance(RetryPolicy(), Backoff)
    assert (RetryPolicy().max_delay, WEBHOOK_BACKOFF.max_delay) == (8.0, 30.0)
    assert RetryPolicy().max_retry_after == WEBHOOK_BACKOFF.max_retry_after == 60.0
