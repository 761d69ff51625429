"""Local retention: delete finished runs older than a cutoff (`agent-runtime gc`).

Local stores (memory, file, SQLite) have no TTL; `collect` is their
retention. It pages through the runs in the chosen terminal statuses
(`completed`, `failed`, `cancelled`; all three by default) and deletes each
whose last update is at least `older_than` ago: its artifacts first
(`ArtifactStore.delete_run`), then the run with everything it owns
(`RunStore.delete_run`: checkpoints, effects, approvals). In that order a
deletion cut short leaves a finished run that the next pass deletes, never
artifacts no run names. A running, created or suspended run is never
touched; asking for one by status is refused. `dry_run` lists what would go
and changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from stores.base import ArtifactStore, RunStore
from stores.records import RunRecord, RunStatus

from agent_runtime.clock import Clock, SystemClock
from agent_runtime.errors import InvalidInput

FINISHED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
FINISHED_NAMES = ", ".join(status.value for status in FINISHED)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d{1,9})([smhdw])")
_PAGE = 100


def parse_duration(text: str, *, flag: str = "--older-than") -> timedelta:
    """`30d`, `12h`, `15m`, `0s`, `2w`, or a sum of them (`1d12h`)."""
    stripped = text.strip()
    parts = _DURATION.findall(stripped)
    if not stripped or "".join(number + unit for number, unit in parts) != stripped:
        raise InvalidInput(f"expected a duration such as 30d, 12h, 15m or 0s, got {text!r}",
                           source=flag)
    return timedelta(seconds=sum(int(number) * _UNITS[unit] for number, unit in parts))


def finished_statuses(names: Collection[str] | None, *, flag: str = "--status"
                      ) -> tuple[RunStatus, ...]:
    """The statuses to collect: the names given, each a finished status, or all three."""
    if not names:
        return FINISHED
    chosen: list[RunStatus] = []
    for name in names:
        try:
            status = RunStatus(name)
        except ValueError:
            raise InvalidInput(f"unknown status {name!r} (one of {FINISHED_NAMES})",
                               source=flag) from None
        if status not in FINISHED:
            raise InvalidInput(f"gc deletes only finished runs ({FINISHED_NAMES}); "
                               f"a {status.value} run is never deleted", source=flag)
        chosen.append(status)
    return tuple(dict.fromkeys(chosen))


@dataclass
class Collected:
    """What a pass deleted (or, with `dry_run`, would delete)."""

    cutoff: datetime
    dry_run: bool
    runs: list[RunRecord] = field(default_factory=list)
    artifacts: int = 0


def collect(store: RunStore, *, older_than: timedelta,
            statuses: Collection[RunStatus] = FINISHED,
            artifacts: ArtifactStore | None = None, dry_run: bool = False,
            clock: Clock | None = None) -> Collected:
    """Delete the finished runs in `statuses` last updated at or before now - `older_than`."""
    refused = [status.value for status in statuses if status not in FINISHED]
    if refused:
        raise InvalidInput(f"gc deletes only finished runs; not {', '.join(refused)}",
                           source="--status")
    cutoff = (clock or SystemClock()).now() - older_than
    result = Collected(cutoff=cutoff, dry_run=dry_run)
    cursor: str | None = None
    while True:
        page = store.list_runs(statuses=statuses, limit=_PAGE, cursor=cursor)
        for run in page.runs:
            # Checked again on the record itself: the listing's filter is the store's.
            if run.status not in FINISHED or run.updated_at > cutoff:
                continue
            result.runs.append(run)
            if dry_run:
                continue
            if artifacts is not None:
                result.artifacts += artifacts.delete_run(run.run_id)
            store.delete_run(run.run_id)
        cursor = page.cursor
        if cursor is None:
            return result
