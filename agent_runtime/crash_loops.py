"""Runs suspended as `crash-loop`, found a page at a time so they can be resumed.

The reconciler suspends a run whose owners keep dying without progress
(reason `crash-loop`) instead of failing it: the run did nothing a fix
cannot mend. Once the cause is fixed (a bad deploy rolled back, a tool that
killed its process mended), an operator resumes every such run at once:
`agent-runtime reconcile --resume-crash-looped`, the AWS reconciler invoked
with `{"resumeCrashLooped": true}`, or `POST /runs/resume-crash-looped`.
Each is resumed as any suspended run is (its resume request filed first, so
a resume lost to a crash or refused for capacity is finished by the
reconciler), and the resume starts its takeover count at zero.

Finding them reads the suspended runs (a page of `limit` at a time, in id
order, with a cursor): an operator's action, not part of any pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from stores.base import RunStore
from stores.records import RunRecord, RunStatus
from stores.transitions import CRASH_LOOP

# Suspended runs read per page when looking for crash-looped ones.
DEFAULT_PAGE = 100


@dataclass
class CrashLoopedPage:
    """The crash-looped runs among one page of suspended runs, and the cursor of the
    next page (None: that was the last)."""

    runs: list[RunRecord] = field(default_factory=list)
    cursor: str | None = None


def crash_looped(run: RunRecord) -> bool:
    """Whether `run` is suspended because its owners kept dying."""
    return (run.status is RunStatus.SUSPENDED and run.suspension is not None
            and run.suspension.reason == CRASH_LOOP)


def crash_looped_page(store: RunStore, *, tenant: str | None = None, cursor: str | None = None,
                      limit: int = DEFAULT_PAGE) -> CrashLoopedPage:
    """The crash-looped runs (of `tenant`, when given) among the next `limit` suspended runs."""
    page = store.list_runs(statuses=[RunStatus.SUSPENDED], tenant=tenant, cursor=cursor,
                           limit=limit)
    return CrashLoopedPage([run for run in page.runs if crash_looped(run)], page.cursor)


def every_crash_looped(store: RunStore, *, tenant: str | None = None,
                       page_size: int = DEFAULT_PAGE) -> Iterator[RunRecord]:
    """Every crash-looped run, a page of suspended runs at a time."""
    cursor: str | None = None
    while True:
        page = crash_looped_page(store, tenant=tenant, cursor=cursor, limit=page_size)
        yield from page.runs
        if page.cursor is None:
            return
        cursor = page.cursor


__all__ = ["DEFAULT_PAGE", "CrashLoopedPage", "crash_looped", "crash_looped_page",
           "every_crash_looped"]
