"""A tenant's quota of new runs: how many may be unfinished at once, and how many it
may start in a minute (the host policy's `maxConcurrentRuns` and `runsPerMinute`).

Asked by every route that creates a run (`POST /runs`, fork) before the run
exists; past either bound the request answers 429 problem+json with
`Retry-After`, and nothing is created. The counts come from the store, so
every `serve` process and every API Lambda container sees the same ones;
each check reads at most `limit` runs of that tenant, newest first.

Requests in flight together may each see the last free place, so a burst can
pass a bound by the number of its concurrent requests; the next request
after it is refused.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from stores.base import RunStore
from stores.records import RunStatus

from agent_runtime.api.problems import ApiProblem

if TYPE_CHECKING:  # the runtime's policy: loaded with the runtime, by a route that needs one
    from agent_runtime.policy import HostPolicy

__all__ = ["check_quota"]

WINDOW = timedelta(minutes=1)
# When the tenant's own runs must finish first, how soon to ask again.
BUSY_RETRY_SECONDS = 5
UNFINISHED = (RunStatus.CREATED, RunStatus.RUNNING)


def check_quota(store: RunStore, policy: HostPolicy, tenant: str | None,
                now: datetime) -> None:
    """Raise a 429 `ApiProblem` when `tenant` may not start another run now."""
    limit = policy.max_concurrent_runs
    if limit is not None:
        unfinished = store.list_runs(statuses=UNFINISHED, tenant=tenant, limit=limit).runs
        if len(unfinished) >= limit:
            raise ApiProblem(429, f"this tenant has {limit} runs unfinished, as many as this "
                                  "host allows at once (policy.maxConcurrentRuns); start more "
                                  "when some finish or suspend",
                             headers={"Retry-After": str(BUSY_RETRY_SECONDS)})
    rate = policy.runs_per_minute
    if rate is not None:
        recent = store.list_runs(tenant=tenant, newest_first=True, limit=rate).runs
        started = sorted(run.created_at for run in recent if run.created_at > now - WINDOW)
        if len(started) >= rate:
            wait = (started[0] + WINDOW - now).total_seconds()
            raise ApiProblem(429, f"this tenant started {rate} runs in the last minute, as "
                                  "many as this host allows (policy.runsPerMinute)",
                             headers={"Retry-After": str(max(1, math.ceil(wait)))})
