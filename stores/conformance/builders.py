"""What the contract suite builds its tests from: a fixed clock, records,
scenarios that put a run in a given state, and the table of fenced writes.

`observe` is everything the contract lets a caller see of a run; a test takes
it before and after a refused write to show the write changed nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from stores.base import RunStore
from stores.records import (
    ArtifactRef,
    Checkpoint,
    CheckpointBudget,
    EffectRecord,
    Frame,
    RunError,
    RunRecord,
)

NOW = datetime(2025, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
LEASE_SECONDS = 60.0
MANIFEST_HASH = "sha256:" + "ab" * 32
RUN = "run-1"
EFFECT_KEY = "effect-1"
UNKNOWN_EFFECT = "run-1:act:call-7"  # the key of an effect whose outcome is unknown
OUTPUT: Any = {"answer": 42, "items": [1, "two", None]}
ERROR = RunError(type="tool_error", message="the tool broke", details={"code": 7})


def at(seconds: float) -> datetime:
    """The suite's clock: `NOW` plus `seconds`."""
    return NOW + timedelta(seconds=seconds)


def make_run(run_id: str = RUN, **fields: Any) -> RunRecord:
    """A new run (`created`, attempt 0) created at `NOW`; `fields` override."""
    values: dict[str, Any] = {"run_id": run_id, "manifest_hash": MANIFEST_HASH,
                              "created_at": NOW, "updated_at": NOW}
    return RunRecord(**(values | fields))


def make_checkpoint(run_id: str = RUN, seq: int = 1, attempt: int = 1, **fields: Any) -> Checkpoint:
    """A checkpoint with every field set; its append-only lists grow with `seq`.

    Content depends only on the arguments, so building it twice gives an
    identical checkpoint; `fields` override any field.
    """
    values: dict[str, Any] = {
        "run_id": run_id, "seq": seq, "attempt": attempt, "manifest_hash": MANIFEST_HASH,
        "runtime_version": "0.1.0-conformance",
        "cursor": [
            Frame(step_path="refine", step_id="refine", step_index=2, child_index=1,
                  continuation={"outputs": ["draft 1"]}),
            Frame(step_path="refine/2/evaluate", step_id="evaluate", step_index=1,
                  loop_iteration=2, continuation={
                      "phase": "tools", "next_tool_index": seq,
                      "messages": [{"role": "user", "content": "héllo ✓"}],
                      "pending_tool_calls": [{"name": "docs__search", "arguments": {"q": "x"},
                                              "idempotency_key": f"{run_id}:refine:{seq}"}],
                      "completed": {"call-0": {"ok": True, "score": 0.25, "none": None}}}),
        ],
        "variables": {"topic": "leases", "seq": seq, "flags": [True, False], "nested": {"a": None}},
        "step_results": [{"step_id": f"step-{n}", "output": n} for n in range(1, seq + 1)],
        "transcript": [{"role": "assistant", "content": f"message {n}"} for n in range(1, seq + 1)],
        "artifacts": [ArtifactRef(uri=f"file:///artifacts/{n}.txt", sha256=f"{n:064x}", size=n,
                                  media_type="text/plain") for n in range(1, seq + 1)],
        "budget": CheckpointBudget(max_total_tokens=10_000, consumed_tokens=100 * seq),
        "created_at": at(seq),
    }
    return Checkpoint(**(values | fields))


# -- scenarios -----------------------------------------------------------------

def start_run(store: RunStore, run_id: str = RUN, *, attempts: int = 1) -> RunRecord:
    """Create a run and reserve `attempts` attempts; each later one takes over an expired lease."""
    run = make_run(run_id)
    store.create_run(run)
    for attempt in range(1, attempts + 1):
        run = store.resume_run(run_id, owner=f"owner-{attempt}", now=at(1000 * (attempt - 1)),
                               lease_seconds=LEASE_SECONDS, allow_running_takeover=attempt > 1)
    return run


def start_busy_run(store: RunStore, run_id: str = RUN, *, attempts: int = 1) -> None:
    """A running run with checkpoint 1 and effect `EFFECT_KEY` reserved by its last attempt."""
    start_run(store, run_id, attempts=attempts)
    store.save_checkpoint(make_checkpoint(run_id, 1, attempts), expected_attempt=attempts)
    store.begin_effect(EFFECT_KEY, run_id=run_id, expected_attempt=attempts, at=at(50))


def run_in(store: RunStore, status: str) -> int:
    """Put run `RUN` in `status` (a busy run unless `created`); return its attempt."""
    if status == "created":
        store.create_run(make_run(RUN))
        return 0
    start_busy_run(store)
    if status == "suspended":
        store.suspend_run(RUN, expected_attempt=1, reason="sub-run",
                          details={"child_run_id": "child-1"}, at=at(100))
    elif status == "completed":
        store.complete_run(RUN, expected_attempt=1, output=OUTPUT, at=at(100))
    elif status == "failed":
        store.fail_run(RUN, expected_attempt=1, error=ERROR, at=at(100))
    elif status == "cancelled":
        store.cancel_run(RUN, at=at(100))
    return 1


def suspend_for_approval(store: RunStore, approval_id: str = "approval-1",
                         **details: Any) -> None:
    """Run `RUN` at attempt 1, suspended on an approval; `details` are added."""
    start_run(store)
    store.suspend_run(RUN, expected_attempt=1, reason="approval", at=at(100), details={
        "approval_id": approval_id, "prompt": "Ship it?", "step_path": "review", **details})


def suspend_for_effect(store: RunStore, key: str = UNKNOWN_EFFECT, **details: Any) -> None:
    """Run `RUN` at attempt 1, suspended on an effect whose outcome is unknown."""
    start_run(store)
    store.suspend_run(RUN, expected_attempt=1, reason="effect-unknown", at=at(100), details={
        "key": key, "tool": "delete_file", "step_path": "act", **details})


def list_effects(store: RunStore, run_id: str) -> list[EffectRecord] | None:
    """The run's effects by key, or None when the store has no `list_effects`."""
    method = getattr(store, "list_effects", None)
    if method is None:
        return None
    effects: list[EffectRecord] = method(run_id)
    return sorted(effects, key=lambda effect: effect.key)


def observe(store: RunStore, run_id: str = RUN) -> dict[str, object]:
    """Everything the contract lets a caller see of a run, to compare before and after."""
    run = store.load_run(run_id)
    if run is None:
        return {"run": None, "latest": store.load_latest_checkpoint(run_id)}
    return {"run": run, "latest": store.load_latest_checkpoint(run_id),
            "checkpoints": store.list_checkpoints(run_id), "effects": list_effects(store, run_id)}


def _next_checkpoint(store: RunStore, run_id: str, attempt: int) -> Checkpoint:
    latest = store.load_latest_checkpoint(run_id)
    return make_checkpoint(run_id, 1 if latest is None else latest.seq + 1, attempt)


Write = Callable[[RunStore, str, int], object]

# One of every fenced write, by name: (store, run_id, expected_attempt). Outputs,
# errors and results differ from the scenarios' own, so none is an identical repeat.
WRITES: dict[str, Write] = {
    "renew_lease": lambda s, r, a: s.renew_lease(
        r, expected_attempt=a, now=at(5000), lease_seconds=LEASE_SECONDS),
    "save_checkpoint": lambda s, r, a: s.save_checkpoint(
        _next_checkpoint(s, r, a), expected_attempt=a, lease_expires_at=at(9000)),
    "suspend_run": lambda s, r, a: s.suspend_run(
        r, expected_attempt=a, reason="approval", details={"approval_id": "w"}, at=at(5000)),
    "suspend_run+checkpoint": lambda s, r, a: s.suspend_run(
        r, expected_attempt=a, reason="approval", details={"approval_id": "w"}, at=at(5000),
        checkpoint=_next_checkpoint(s, r, a)),
    "complete_run": lambda s, r, a: s.complete_run(
        r, expected_attempt=a, output="written", at=at(5000)),
    "complete_run+checkpoint": lambda s, r, a: s.complete_run(
        r, expected_attempt=a, output="written", at=at(5000), checkpoint=_next_checkpoint(s, r, a)),
    "fail_run": lambda s, r, a: s.fail_run(
        r, expected_attempt=a, error=RunError(type="w", message="w"), at=at(5000)),
    "fail_run+checkpoint": lambda s, r, a: s.fail_run(
        r, expected_attempt=a, error=RunError(type="w", message="w"), at=at(5000),
        checkpoint=_next_checkpoint(s, r, a)),
    "cancel_run": lambda s, r, a: s.cancel_run(r, at=at(5000), expected_attempt=a),
    "begin_effect": lambda s, r, a: s.begin_effect(
        "effect-new", run_id=r, expected_attempt=a, at=at(5000)),
    "complete_effect": lambda s, r, a: s.complete_effect(
        EFFECT_KEY, run_id=r, expected_attempt=a, result="written", at=at(5000)),
}
WRITES_OF_A_RUNNING_RUN = sorted(set(WRITES) - {"cancel_run", "fail_run", "fail_run+checkpoint"})

NAMING_A_RUN: dict[str, Write] = WRITES | {
    "list_checkpoints": lambda s, r, a: s.list_checkpoints(r),
    "resume_run": lambda s, r, a: s.resume_run(r, owner="o", now=NOW, lease_seconds=60),
    "resume_run+takeover": lambda s, r, a: s.resume_run(
        r, owner="o", now=NOW, lease_seconds=60, allow_running_takeover=True),
    "cancel_run+unfenced": lambda s, r, a: s.cancel_run(r, at=NOW),
    "resolve_approval": lambda s, r, a: s.resolve_approval(
        r, "approval-1", approved=True, response=None, responded_by=None, at=NOW),
    "request_resume": lambda s, r, a: s.request_resume(r, at=NOW, reason="sub-run-finished"),
}


def finish(store: RunStore, kind: str, *, attempt: int = 1, at_: datetime = NOW,
           output: Any = OUTPUT, error: RunError = ERROR,
           checkpoint: Checkpoint | None = None) -> None:
    if kind == "complete_run":
        store.complete_run(RUN, expected_attempt=attempt, output=output, at=at_,
                           checkpoint=checkpoint)
    else:
        store.fail_run(RUN, expected_attempt=attempt, error=error, at=at_, checkpoint=checkpoint)


def assert_utc(value: datetime | None) -> None:
    assert value is not None
    assert value.tzinfo is not None and value.utcoffset() == timedelta(0), value


def every_page(store: RunStore, *, limit: int, pages: int, **query: Any) -> list[str]:
    """The ids of every run `list_runs(**query)` lists, page by page of at most `limit`
    (each page non-empty), following its cursor: at most `pages` pages."""
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(pages):
        page = store.list_runs(limit=limit, cursor=cursor, **query)
        assert 0 < len(page.runs) <= limit
        seen += [run.run_id for run in page.runs]
        cursor = page.cursor
        if cursor is None:
            break
    return seen
