"""When an HTTP call is worth repeating, and how long to wait first.

One rule set for every outbound HTTP call the runtime repeats (model
providers, webhook steps):
- repeated: 408, 425, 429 and 5xx answers (and, decided by the caller,
  connection failures); any other answer is final;
- the wait is the server's own when it sent one: `retry-after-ms`, else
  `Retry-After` in seconds or as an HTTP date;
- a server asking for more than `Backoff.max_retry_after` is not waited for:
  the call fails at once, rather than holding a run's lease idle for minutes
  on a server that said it will not answer sooner;
- with no wait asked for, exponential backoff with "equal jitter" (at least
  half of the step), so the retries of many runs spread out.

Each caller keeps its own numbers (a `Backoff`), not its own rules.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC

RETRYABLE_STATUSES = frozenset({408, 425, 429})


def status_retryable(status: int) -> bool:
    """An answer worth repeating the identical request for: a timeout, "too early",
    throttling, or a server error."""
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


def retry_after_seconds(headers: Mapping[str, str] | None, *,
                        now: Callable[[], float] = time.time) -> float | None:
    """The wait a response asked for: `retry-after-ms`, else `Retry-After` in seconds
    or as an HTTP date (a date in the past is no wait); None when absent or unreadable."""
    if not headers:
        return None
    lowered = {key.lower(): value for key, value in headers.items()}
    milliseconds = lowered.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": UTC with no zone claimed (RFC 5322), not local time
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now())


@dataclass(frozen=True)
class Backoff:
    """One caller's numbers for the shared rules: the first step, the longest
    step, and the longest server-asked wait honoured."""

    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0
    # The jitter source, `random.uniform`'s shape; a test passes a fixed one.
    uniform: Callable[[float, float], float] = field(default=random.uniform, compare=False)

    def delay(self, retry: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry number `retry` (1-based), given the wait the
        server asked for; None: the server asked for too long, do not retry."""
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** (retry - 1))
        return ceiling / 2 + self.uniform(0, ceiling / 2)

    def refusal(self, retry_after: float, *, asker: str = "the server") -> str:
        """Why a retry `asker` asked to delay by `retry_after` seconds is not made."""
        return (f"{asker} asked to retry after {retry_after:.0f}s, more than the "
                f"{self.max_retry_after:.0f}s this runtime waits")
