"""What a run's attempt reads from its store before it executes, in few store calls.

An engine whose store waits on I/O makes every store call on its store thread
(`agent_runtime.store_thread`): a trip there and back, which a loaded `serve`
also pays in queueing. So a resume reads its run with the latest checkpoint
in one call (`run_and_latest`: before the attempt is reserved, so that nothing
runs from a damaged checkpoint), and reserves the attempt with what it starts
from in another (`reserve_attempt`, reading `attempt_start` once the
reservation committed): the latest checkpoint again, since another owner may
have committed before the reservation, the effects, and a fork's first
checkpoint, saved then. Each function here runs whole on the store thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from stores.base import CorruptRecord, RunStore
from stores.records import Checkpoint, RunRecord

from agent_runtime.checkpoint_check import ForkSourceMissing
from agent_runtime.clock import Clock
from agent_runtime.errors import NotFound
from agent_runtime.excerpts import excerpt
from agent_runtime.forks import first_checkpoint, fork_origin
from agent_runtime.results import TERMINAL
from agent_runtime.run_options import FORKED_FROM


def existing_run(store: RunStore, run_id: str, *, where: str = "this store",
                 source: str | None = None) -> RunRecord:
    """The record of `run_id`, or `NotFound` naming the run and where it was looked for
    (`source` names the input that gave the id, else the field is `run_id`)."""
    record = store.load_run(run_id)
    if record is None:
        raise NotFound(f"no run with id {excerpt(run_id)} in {where}", source=source,
                       field=None if source is not None else "run_id")
    return record


def run_and_latest(store: RunStore, run_id: str) -> tuple[RunRecord, Checkpoint | None]:
    """The run and, unless it finished, its latest checkpoint."""
    record = existing_run(store, run_id)
    return record, latest_unless_finished(store, record)


def latest_unless_finished(store: RunStore, record: RunRecord) -> Checkpoint | None:
    """The latest checkpoint of `record`'s run, unless the run finished (then None,
    unread: nothing resumes from it)."""
    return None if record.status in TERMINAL else store.load_latest_checkpoint(record.run_id)


def attempt_start(store: RunStore, record: RunRecord, *, clock: Clock,
                  lease_seconds: float) -> Checkpoint | None:
    """What the reserved attempt of `record` starts from: its latest checkpoint, a
    fork's first one saved now, or None. Its effects are read too, so that a damaged
    one fails the attempt before it begins (`CorruptRecord`)."""
    checkpoint = store.load_latest_checkpoint(record.run_id)
    store.list_effects(record.run_id)
    if checkpoint is None and isinstance(record.options.get(FORKED_FROM), dict):
        checkpoint = _start_fork(store, record, clock=clock, lease_seconds=lease_seconds)
    return checkpoint


@dataclass(frozen=True)
class ReservedAttempt:
    """A reserved attempt: its run's record and what it starts from (`attempt_start`),
    or why it cannot begin (`cannot`: a damaged checkpoint or effect, a fork's source
    gone). The reservation stands either way, so the caller fails the run then."""

    record: RunRecord
    start: Checkpoint | None = None
    cannot: ForkSourceMissing | CorruptRecord | None = None


def reserve_attempt(store: RunStore, run_id: str, *, owner: str, clock: Clock,
                    lease_seconds: float, allow_running_takeover: bool = False,
                    expired_owner: str | None = None) -> ReservedAttempt:
    """The run's next attempt reserved now (`RunStore.resume_run`, raising what it
    raises), then what the attempt starts from, read once the reservation committed."""
    record = store.resume_run(run_id, owner=owner, now=clock.now(), lease_seconds=lease_seconds,
                              allow_running_takeover=allow_running_takeover,
                              expired_owner=expired_owner)
    try:
        start = attempt_start(store, record, clock=clock, lease_seconds=lease_seconds)
    except (ForkSourceMissing, CorruptRecord) as cannot:
        return ReservedAttempt(record, cannot=cannot)
    return ReservedAttempt(record, start)


def _start_fork(store: RunStore, record: RunRecord, *, clock: Clock,
                lease_seconds: float) -> Checkpoint:
    """A forked run's first checkpoint, saved as this run's seq 1 (`forks`)."""
    source_id, seq = fork_origin(record)
    source = store.load_checkpoint(source_id, seq) if seq is not None else None
    now = clock.now()
    start = first_checkpoint(record, source, now)
    store.save_checkpoint(start, expected_attempt=record.attempt,
                          lease_expires_at=now + timedelta(seconds=lease_seconds))
    return start


__all__ = ["ReservedAttempt", "attempt_start", "existing_run", "latest_unless_finished",
           "reserve_attempt", "run_and_latest"]
