"""The RunStore contract suite: every rule of `stores.base` as pytest tests.

A store is done when this suite passes on it unchanged. To run it on another
store, subclass `RunStoreConformance` in a test module and provide a fixture
named `store` that yields a fresh, empty, open store and closes it afterwards:

    # tests/test_my_store.py
    import pytest
    from stores.conformance import RunStoreConformance
    class TestMyStore(RunStoreConformance):
        @pytest.fixture
        def store(self, tmp_path):
            with MyStore(tmp_path / "db") as store:
                yield store

Each test is named after the rule it checks and asserts only what the
`RunStore` methods show: the error raised and the state read back afterwards,
never a backend's internals. Time is a fixed, timezone-aware UTC `NOW`, moved
with `at(seconds)`. `make_run` and `make_checkpoint` build records for a store
author's own tests too.

`list_effects(run_id)` is not part of the `RunStore` protocol: the one test
that needs it skips, with the reason, on a store without it, and the "changes
nothing" checks then cover the run and its checkpoints only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from stores.base import (
    ApprovalConflict,
    CheckpointConflict,
    InvalidTransition,
    LeaseHeld,
    RunAlreadyExists,
    RunNotFound,
    RunStore,
    RunTerminal,
    StaleAttempt,
)
from stores.records import (
    ArtifactRef,
    Budget,
    Checkpoint,
    CheckpointBudget,
    EffectRecord,
    EffectStatus,
    EngineRef,
    Frame,
    ParentRef,
    RunError,
    RunRecord,
    RunStatus,
)

NOW = datetime(2025, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
LEASE_SECONDS = 60.0
MANIFEST_HASH = "sha256:" + "ab" * 32
RUN = "run-1"
EFFECT_KEY = "effect-1"
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


def suspend_for_approval(store: RunStore, approval_id: str = "approval-1") -> None:
    start_run(store)
    store.suspend_run(RUN, expected_attempt=1, reason="approval", at=at(100), details={
        "approval_id": approval_id, "prompt": "Ship it?", "step_path": "review"})


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


class RunStoreConformance:
    """The RunStore contract. Subclass it and provide a `store` fixture (see the module)."""

    # -- run ids and missing runs ---------------------------------------------

    def test_create_run_round_trips_every_field(self, store: RunStore) -> None:
        run = make_run(
            manifest={"schemaVersion": "1.0", "steps": [{"id": "a", "type": "prompt"}]},
            variables={"topic": "ünïcode", "n": 1.5}, budget=Budget(max_total_tokens=500),
            parent=ParentRef(run_id="parent-1", step_path="loop/0/child"), tenant="tenant-a",
            engine=EngineRef(kind="stepfunctions", execution_id="arn:aws:states:x"),
            consumed_tokens=12, options={"model": "scripted/echo"}, updated_at=at(1))
        store.create_run(run)
        loaded = store.load_run(RUN)
        assert loaded == run
        assert loaded is not None
        assert_utc(loaded.created_at)
        assert_utc(loaded.updated_at)

    def test_run_ids_are_unique(self, store: RunStore) -> None:
        store.create_run(make_run())
        before = observe(store)
        with pytest.raises(RunAlreadyExists):
            store.create_run(make_run(manifest_hash="sha256:other", tenant="other"))
        assert observe(store) == before

    @pytest.mark.parametrize("method", sorted(NAMING_A_RUN))
    def test_run_not_found_before_anything_else(self, store: RunStore, method: str) -> None:
        store.create_run(make_run("other-run"))
        with pytest.raises(RunNotFound):
            NAMING_A_RUN[method](store, "missing-run", 7)
        assert store.load_run("missing-run") is None

    def test_loads_of_a_missing_run_return_none(self, store: RunStore) -> None:
        assert store.load_run("missing-run") is None
        assert store.load_latest_checkpoint("missing-run") is None
        assert store.load_checkpoint("missing-run", 1) is None

    def test_delete_run_of_a_missing_run_is_a_noop(self, store: RunStore) -> None:
        store.delete_run("missing-run")
        assert store.load_run("missing-run") is None

    # -- attempts and leases --------------------------------------------------

    def test_resume_run_from_created_reserves_attempt_1_with_a_lease(self, store: RunStore) -> None:
        store.create_run(make_run())
        run = store.resume_run(RUN, owner="worker-a", now=at(10), lease_seconds=LEASE_SECONDS)
        for record in (run, store.load_run(RUN)):
            assert record is not None
            assert (record.status, record.attempt) == (RunStatus.RUNNING, 1)
            assert (record.lease_owner, record.lease_expires_at) == ("worker-a", at(70))
            assert_utc(record.lease_expires_at)

    def test_resume_run_from_suspended_increments_attempt_and_keeps_suspension(
            self, store: RunStore) -> None:
        run_in(store, "suspended")
        run = store.resume_run(RUN, owner="worker-b", now=at(200), lease_seconds=LEASE_SECONDS)
        for record in (run, store.load_run(RUN)):
            assert record is not None
            assert (record.status, record.attempt, record.lease_owner) == (
                RunStatus.RUNNING, 2, "worker-b")
            assert record.lease_expires_at == at(260)
            assert record.suspension is not None
            assert (record.suspension.reason, record.suspension.details) == (
                "sub-run", {"child_run_id": "child-1"})

    @pytest.mark.parametrize("seconds_later", [10, 10_000], ids=["live", "expired"])
    def test_resume_run_on_running_without_takeover_raises_lease_held(
            self, store: RunStore, seconds_later: int) -> None:
        start_run(store)
        before = observe(store)
        with pytest.raises(LeaseHeld):
            store.resume_run(RUN, owner="other", now=at(seconds_later), lease_seconds=60)
        assert observe(store) == before

    def test_resume_run_takeover_only_once_the_lease_expired(self, store: RunStore) -> None:
        start_run(store)  # lease expires at(60)
        before = observe(store)
        with pytest.raises(LeaseHeld):
            store.resume_run(RUN, owner="other", now=at(59), lease_seconds=60,
                             allow_running_takeover=True)
        assert observe(store) == before
        run = store.resume_run(RUN, owner="other", now=at(61), lease_seconds=60,
                               allow_running_takeover=True)
        assert (run.status, run.attempt, run.lease_owner, run.lease_expires_at) == (
            RunStatus.RUNNING, 2, "other", at(121))
        assert store.load_run(RUN) == run

    @pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
    def test_resume_run_on_a_terminal_run_raises_run_terminal(
            self, store: RunStore, status: str) -> None:
        run_in(store, status)
        before = observe(store)
        for takeover in (False, True):
            with pytest.raises(RunTerminal):
                store.resume_run(RUN, owner="o", now=at(10_000), lease_seconds=60,
                                 allow_running_takeover=takeover)
        assert observe(store) == before

    def test_renew_lease_extends_the_lease(self, store: RunStore) -> None:
        start_run(store)
        store.renew_lease(RUN, expected_attempt=1, now=at(30), lease_seconds=90)
        run = store.load_run(RUN)
        assert run is not None
        assert (run.status, run.attempt, run.lease_owner) == (RunStatus.RUNNING, 1, "owner-1")
        assert run.lease_expires_at == at(120)

    def test_save_checkpoint_renews_the_lease_in_the_same_write(self, store: RunStore) -> None:
        start_run(store)
        store.save_checkpoint(make_checkpoint(seq=1), expected_attempt=1, lease_expires_at=at(500))
        run = store.load_run(RUN)
        assert run is not None and run.lease_expires_at == at(500)
        store.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1)
        run = store.load_run(RUN)
        assert run is not None and run.lease_expires_at == at(500)

    def test_suspend_run_releases_the_lease_and_replaces_the_suspension(
            self, store: RunStore) -> None:
        suspend_for_approval(store)
        run = store.load_run(RUN)
        assert run is not None and run.suspension is not None
        assert run.status is RunStatus.SUSPENDED
        assert (run.lease_owner, run.lease_expires_at) == (None, None)
        assert (run.suspension.reason, run.suspension.decision) == ("approval", None)
        assert run.suspension.details["approval_id"] == "approval-1"
        store.resume_run(RUN, owner="o", now=at(200), lease_seconds=60)
        store.suspend_run(RUN, expected_attempt=2, reason="token-budget", at=at(210),
                          details={"max_total_tokens": 10, "consumed_tokens": 12})
        run = store.load_run(RUN)
        assert run is not None and run.suspension is not None
        assert (run.suspension.reason, run.suspension.details) == (
            "token-budget", {"max_total_tokens": 10, "consumed_tokens": 12})

    @pytest.mark.parametrize("write", WRITES_OF_A_RUNNING_RUN)
    @pytest.mark.parametrize("status", ["created", "suspended"])
    def test_write_of_a_running_run_on_a_run_not_running_raises_invalid_transition(
            self, store: RunStore, status: str, write: str) -> None:
        attempt = run_in(store, status)
        before = observe(store)
        with pytest.raises(InvalidTransition):
            WRITES[write](store, RUN, attempt)
        assert observe(store) == before

    @pytest.mark.parametrize("status", ["created", "suspended"])
    def test_fail_run_is_allowed_before_running(self, store: RunStore, status: str) -> None:
        attempt = run_in(store, status)
        store.fail_run(RUN, expected_attempt=attempt, error=ERROR, at=at(300))
        run = store.load_run(RUN)
        assert run is not None and (run.status, run.error) == (RunStatus.FAILED, ERROR)

    @pytest.mark.parametrize("status", ["created", "running", "suspended"])
    def test_cancel_run_is_allowed_from_every_non_terminal_state(
            self, store: RunStore, status: str) -> None:
        run_in(store, status)
        store.cancel_run(RUN, at=at(300))
        run = store.load_run(RUN)
        assert run is not None and run.status is RunStatus.CANCELLED

    # -- fencing and check order ----------------------------------------------

    @pytest.mark.parametrize("stale", [1, 3], ids=["older", "newer"])
    @pytest.mark.parametrize("write", sorted(WRITES))
    def test_stale_attempt_changes_nothing(self, store: RunStore, write: str, stale: int) -> None:
        start_busy_run(store, attempts=2)
        before = observe(store)
        with pytest.raises(StaleAttempt):
            WRITES[write](store, RUN, stale)
        assert observe(store) == before

    @pytest.mark.parametrize("write", sorted(WRITES))
    @pytest.mark.parametrize("status", ["created", "suspended", "completed", "failed", "cancelled"])
    def test_stale_attempt_before_run_terminal_and_invalid_transition(
            self, store: RunStore, status: str, write: str) -> None:
        attempt = run_in(store, status)
        before = observe(store)
        with pytest.raises(StaleAttempt):
            WRITES[write](store, RUN, attempt + 1)
        assert observe(store) == before

    def test_stale_attempt_before_checkpoint_conflict(self, store: RunStore) -> None:
        start_busy_run(store, attempts=2)
        before = observe(store)
        with pytest.raises(StaleAttempt):
            store.save_checkpoint(make_checkpoint(seq=5, attempt=1), expected_attempt=1)
        with pytest.raises(StaleAttempt):
            store.save_checkpoint(make_checkpoint(seq=1, attempt=1, variables={}),
                                  expected_attempt=1)
        assert observe(store) == before

    # -- terminal states ------------------------------------------------------

    @pytest.mark.parametrize("write", [*WRITES_OF_A_RUNNING_RUN, "fail_run", "fail_run+checkpoint"])
    def test_run_terminal_on_every_write_of_the_owner_after_an_external_cancel(
            self, store: RunStore, write: str) -> None:
        start_busy_run(store)
        store.cancel_run(RUN, at=at(100))
        before = observe(store)
        with pytest.raises(RunTerminal):
            WRITES[write](store, RUN, 1)
        assert observe(store) == before

    @pytest.mark.parametrize("write", sorted(WRITES))
    @pytest.mark.parametrize("status", ["completed", "failed"])
    def test_run_terminal_on_every_write_after_the_run_finished(
            self, store: RunStore, status: str, write: str) -> None:
        run_in(store, status)
        before = observe(store)
        with pytest.raises(RunTerminal):
            WRITES[write](store, RUN, 1)
        assert observe(store) == before

    def test_cancel_run_twice_is_a_noop(self, store: RunStore) -> None:
        start_busy_run(store)
        store.cancel_run(RUN, at=at(100))
        before = observe(store)
        store.cancel_run(RUN, at=at(200))
        store.cancel_run(RUN, at=at(300), expected_attempt=1)
        assert observe(store) == before

    def test_complete_run_records_the_output(self, store: RunStore) -> None:
        start_run(store)
        store.complete_run(RUN, expected_attempt=1, output=OUTPUT, at=at(100))
        run = store.load_run(RUN)
        assert run is not None
        assert (run.status, run.attempt, run.output) == (RunStatus.COMPLETED, 1, OUTPUT)

    @pytest.mark.parametrize("with_checkpoint", [False, True], ids=["plain", "checkpoint"])
    @pytest.mark.parametrize("kind", ["complete_run", "fail_run"])
    def test_identical_terminal_repeat_is_a_noop(
            self, store: RunStore, kind: str, with_checkpoint: bool) -> None:
        start_busy_run(store)
        checkpoint = make_checkpoint(seq=2) if with_checkpoint else None
        finish(store, kind, at_=at(100), checkpoint=checkpoint)
        before = observe(store)
        again = None if checkpoint is None else checkpoint.model_copy(
            update={"created_at": at(999)})  # identity ignores created_at
        finish(store, kind, at_=at(200), checkpoint=again)  # `at` is ignored
        finish(store, kind, at_=at(300))  # no checkpoint: nothing to compare
        assert observe(store) == before

    @pytest.mark.parametrize("repeat", [
        "complete_run:other-output", "complete_run:other-checkpoint", "complete_run:new-checkpoint",
        "complete_run:then-fail", "fail_run:other-error", "fail_run:then-complete",
        "fail_run:other-checkpoint"])
    def test_different_terminal_repeat_raises_run_terminal(self, store: RunStore,
                                                           repeat: str) -> None:
        kind, change = repeat.split(":")
        start_busy_run(store)
        finish(store, kind, at_=at(100), checkpoint=make_checkpoint(seq=2))
        before = observe(store)
        with pytest.raises(RunTerminal):
            if change == "other-output":
                finish(store, kind, output={"answer": 43})
            elif change == "other-error":
                finish(store, kind, error=RunError(type="other", message="other"))
            elif change == "other-checkpoint":
                finish(store, kind, checkpoint=make_checkpoint(seq=2, variables={"x": 1}))
            elif change == "new-checkpoint":
                finish(store, kind, checkpoint=make_checkpoint(seq=3))
            else:
                finish(store, "fail_run" if kind == "complete_run" else "complete_run")
        assert observe(store) == before

    @pytest.mark.parametrize("status", ["completed", "failed"])
    def test_cancel_run_of_a_finished_run_raises_run_terminal(self, store: RunStore,
                                                              status: str) -> None:
        run_in(store, status)
        before = observe(store)
        with pytest.raises(RunTerminal):
            store.cancel_run(RUN, at=at(500))
        assert observe(store) == before

    # -- checkpoints ----------------------------------------------------------

    def test_checkpoint_round_trips_every_field(self, store: RunStore) -> None:
        start_run(store)
        first, second = make_checkpoint(seq=1), make_checkpoint(seq=2, attempt=1)
        store.save_checkpoint(first, expected_attempt=1)
        store.suspend_run(RUN, expected_attempt=1, reason="approval", at=at(5),
                          details={"approval_id": "a"}, checkpoint=second)
        assert store.load_checkpoint(RUN, 1) == first
        assert store.load_checkpoint(RUN, 2) == second
        assert store.load_latest_checkpoint(RUN) == second
        loaded = store.load_checkpoint(RUN, 1)
        assert loaded is not None
        assert loaded.cursor[1].continuation == first.cursor[1].continuation
        assert_utc(loaded.created_at)

    def test_checkpoint_seq_starts_at_1(self, store: RunStore) -> None:
        start_run(store)
        for seq in (0, 2):
            with pytest.raises(CheckpointConflict):
                store.save_checkpoint(make_checkpoint(seq=seq), expected_attempt=1)
        assert store.list_checkpoints(RUN) == []
        assert store.load_latest_checkpoint(RUN) is None
        store.save_checkpoint(make_checkpoint(seq=1), expected_attempt=1)
        assert [info.seq for info in store.list_checkpoints(RUN)] == [1]

    def test_checkpoint_seq_is_latest_plus_1_across_attempts(self, store: RunStore) -> None:
        start_busy_run(store)
        store.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1)
        store.resume_run(RUN, owner="b", now=at(1000), lease_seconds=60,
                         allow_running_takeover=True)
        with pytest.raises(CheckpointConflict):
            store.save_checkpoint(make_checkpoint(seq=1, attempt=2), expected_attempt=2)
        store.save_checkpoint(make_checkpoint(seq=3, attempt=2), expected_attempt=2)
        infos = store.list_checkpoints(RUN)
        assert [(info.seq, info.attempt) for info in infos] == [(1, 1), (2, 1), (3, 2)]

    def test_skipped_seq_raises_checkpoint_conflict(self, store: RunStore) -> None:
        start_busy_run(store)
        before = observe(store)
        with pytest.raises(CheckpointConflict):
            store.save_checkpoint(make_checkpoint(seq=3), expected_attempt=1)
        assert observe(store) == before

    def test_identical_resave_is_a_noop_ignoring_created_at(self, store: RunStore) -> None:
        start_busy_run(store)
        store.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1)
        before = observe(store)
        for seq in (2, 1):  # the latest and an older one
            store.save_checkpoint(make_checkpoint(seq=seq, created_at=at(777)), expected_attempt=1,
                                  lease_expires_at=at(888))
        assert observe(store) == before

    @pytest.mark.parametrize("seq", [1, 2], ids=["older", "latest"])
    def test_different_checkpoint_at_a_used_seq_raises_checkpoint_conflict(
            self, store: RunStore, seq: int) -> None:
        start_busy_run(store)
        store.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1)
        before = observe(store)
        with pytest.raises(CheckpointConflict):
            store.save_checkpoint(make_checkpoint(seq=seq, variables={"changed": True}),
                                  expected_attempt=1)
        assert observe(store) == before

    def test_load_checkpoint_of_an_unknown_seq_returns_none(self, store: RunStore) -> None:
        start_busy_run(store)
        assert store.load_checkpoint(RUN, 2) is None
        assert store.load_checkpoint(RUN, 0) is None

    def test_list_checkpoints_reports_seq_attempt_created_at_and_size(self,
                                                                      store: RunStore) -> None:
        start_run(store)
        assert store.list_checkpoints(RUN) == []
        store.save_checkpoint(make_checkpoint(seq=1), expected_attempt=1)
        store.resume_run(RUN, owner="b", now=at(1000), lease_seconds=60,
                         allow_running_takeover=True)
        store.save_checkpoint(make_checkpoint(seq=2, attempt=2), expected_attempt=2)
        store.complete_run(RUN, expected_attempt=2, output=1, at=at(1001),
                           checkpoint=make_checkpoint(seq=3, attempt=2))
        infos = store.list_checkpoints(RUN)
        assert [(i.seq, i.attempt, i.created_at) for i in infos] == [
            (1, 1, at(1)), (2, 2, at(2)), (3, 2, at(3))]
        assert all(info.size_bytes > 0 for info in infos)
        for info in infos:
            assert_utc(info.created_at)

    @pytest.mark.parametrize("write", ["suspend_run", "complete_run", "fail_run"])
    def test_state_change_with_a_checkpoint_commits_both(self, store: RunStore,
                                                         write: str) -> None:
        start_busy_run(store)
        WRITES[f"{write}+checkpoint"](store, RUN, 1)
        run = store.load_run(RUN)
        assert run is not None
        assert run.status is {"suspend_run": RunStatus.SUSPENDED, "fail_run": RunStatus.FAILED,
                              "complete_run": RunStatus.COMPLETED}[write]
        assert store.load_latest_checkpoint(RUN) == make_checkpoint(seq=2)

    @pytest.mark.parametrize("conflict", ["skipped-seq", "used-seq"])
    @pytest.mark.parametrize("write", ["suspend_run", "complete_run", "fail_run"])
    def test_state_change_with_a_conflicting_checkpoint_changes_nothing(
            self, store: RunStore, write: str, conflict: str) -> None:
        start_busy_run(store)
        store.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1)
        bad = make_checkpoint(seq=4) if conflict == "skipped-seq" else make_checkpoint(
            seq=2, variables={"changed": True})
        before = observe(store)
        with pytest.raises(CheckpointConflict):
            if write == "suspend_run":
                store.suspend_run(RUN, expected_attempt=1, reason="sub-run", details={},
                                  at=at(100), checkpoint=bad)
            else:
                finish(store, write, checkpoint=bad)
        assert observe(store) == before

    def test_lists_that_do_not_extend_the_previous_ones_load_exactly_as_saved(
            self, store: RunStore) -> None:
        # Each list goes through: extended, shortened, an earlier entry changed at the
        # same length and at a greater length, emptied, regrown, left equal.
        names = [["a", "b"], ["a", "b", "c"], ["a", "x"], ["a", "x", "d"], ["a", "y", "d", "e"],
                 ["a", "y", "z", "e"], [], ["f"], ["f", "g", "h"], ["f", "g", "h"], ["f"]]
        start_run(store)
        saved = []
        for seq in range(1, len(names) + 1):
            transcript, results, files = (names[(seq - 1) * k % len(names)] for k in (1, 3, 5))
            checkpoint = make_checkpoint(
                seq=seq, transcript=[{"role": "user", "content": n} for n in transcript],
                step_results=[{"step_id": n} for n in results],
                artifacts=[ArtifactRef(uri=f"file:///{n}", sha256=n * 64, size=1) for n in files])
            saved.append(checkpoint)
            if seq == len(names):
                store.complete_run(RUN, expected_attempt=1, output=None, at=at(100),
                                   checkpoint=checkpoint)
            else:
                store.save_checkpoint(checkpoint, expected_attempt=1)
        for checkpoint in [*reversed(saved), *saved]:
            assert store.load_checkpoint(RUN, checkpoint.seq) == checkpoint
        assert store.load_latest_checkpoint(RUN) == saved[-1]

    def test_storage_grows_linearly_with_an_appended_transcript(self, store: RunStore) -> None:
        start_run(store)
        transcript: list[dict[str, Any]] = []
        for seq in range(1, 201):
            transcript = [*transcript, {"role": "assistant", "n": seq, "content": "x" * 180}]
            store.save_checkpoint(make_checkpoint(seq=seq, transcript=transcript, step_results=[],
                                                  artifacts=[]), expected_attempt=1)
        sizes = [info.size_bytes for info in store.list_checkpoints(RUN)]
        assert len(sizes) == 200
        assert sum(sizes[-20:]) < 3 * sum(sizes[10:30]), (sizes[10:30], sizes[-20:])
        assert store.load_latest_checkpoint(RUN) == make_checkpoint(
            seq=200, transcript=transcript, step_results=[], artifacts=[])

    # -- list_runs ------------------------------------------------------------

    def test_list_runs_orders_by_run_id(self, store: RunStore) -> None:
        ids = ["b", "a-2", "c", "a-10", "B", "a-1"]
        for run_id in ids:
            store.create_run(make_run(run_id))
        page = store.list_runs()
        assert [run.run_id for run in page.runs] == sorted(ids)
        assert page.cursor is None
        assert page.runs[0] == make_run("B")

    def test_list_runs_filters_by_status(self, store: RunStore) -> None:
        self._population(store)
        assert self._ids(store, statuses={RunStatus.COMPLETED, RunStatus.FAILED}) == [
            "f-completed", "g-failed"]
        assert self._ids(store, statuses={RunStatus.RUNNING}) == [
            "c-running-expired", "d-running-live"]
        assert len(self._ids(store)) == 8

    def test_list_runs_lease_expired_before_matches_expired_running_and_old_created_only(
            self, store: RunStore) -> None:
        self._population(store)
        assert self._ids(store, lease_expired_before=at(600)) == [
            "a-created-old", "c-running-expired"]
        assert self._ids(store, lease_expired_before=at(600), statuses={RunStatus.RUNNING}) == [
            "c-running-expired"]
        assert self._ids(store, lease_expired_before=at(-7200)) == []

    def test_list_runs_filters_by_parent_run_id(self, store: RunStore) -> None:
        for run_id, parent in [("c3", "p1"), ("c1", "p1"), ("c2", "p2"), ("c0", None)]:
            ref = None if parent is None else ParentRef(run_id=parent, step_path="loop/0/sub")
            store.create_run(make_run(run_id, parent=ref))
        assert self._ids(store, parent_run_id="p1") == ["c1", "c3"]
        assert self._ids(store, parent_run_id="p9") == []

    @pytest.mark.parametrize("filtered", [False, True], ids=["all", "filtered"])
    def test_list_runs_pages_cover_every_run_exactly_once(self, store: RunStore,
                                                          filtered: bool) -> None:
        ids = [f"run-{n:02d}" for n in (7, 3, 11, 1, 9, 5, 2, 10, 4, 8, 6)]
        for n, run_id in enumerate(ids):
            store.create_run(make_run(run_id))
            if filtered and n % 2:
                store.cancel_run(run_id, at=at(1))
        statuses = {RunStatus.CREATED} if filtered else None
        expected = sorted(r for n, r in enumerate(ids) if not (filtered and n % 2))
        seen: list[str] = []
        cursor: str | None = None
        for _ in range(len(ids) + 1):
            page = store.list_runs(statuses=statuses, limit=3, cursor=cursor)
            assert 0 < len(page.runs) <= 3
            seen += [run.run_id for run in page.runs]
            cursor = page.cursor
            if cursor is None:
                break
        assert seen == expected

    def test_list_runs_cursor_is_none_on_a_single_page(self, store: RunStore) -> None:
        for run_id in ("a", "b", "c"):
            store.create_run(make_run(run_id))
        page = store.list_runs(limit=10)
        assert ([run.run_id for run in page.runs], page.cursor) == (["a", "b", "c"], None)
        assert store.list_runs(statuses={RunStatus.FAILED}, limit=10).model_dump() == {
            "runs": [], "cursor": None}

    @staticmethod
    def _ids(store: RunStore, **filters: Any) -> list[str]:
        page = store.list_runs(limit=1000, **filters)
        assert page.cursor is None
        return [run.run_id for run in page.runs]

    @staticmethod
    def _population(store: RunStore) -> None:
        """One run per situation `lease_expired_before=at(600)` must tell apart."""
        store.create_run(make_run("a-created-old", created_at=at(-3600)))
        store.create_run(make_run("b-created-new", created_at=at(3600)))
        for run_id in ("c-running-expired", "d-running-live", "e-suspended", "f-completed",
                       "g-failed", "h-cancelled"):
            store.create_run(make_run(run_id, created_at=at(-3600)))
            lease = 7200 if run_id == "d-running-live" else 60
            store.resume_run(run_id, owner="o", now=NOW, lease_seconds=lease)
        store.suspend_run("e-suspended", expected_attempt=1, reason="sub-run", details={}, at=NOW)
        store.complete_run("f-completed", expected_attempt=1, output=None, at=NOW)
        store.fail_run("g-failed", expected_attempt=1, error=ERROR, at=NOW)
        store.cancel_run("h-cancelled", at=NOW)

    # -- approvals ------------------------------------------------------------

    def test_resolve_approval_records_the_decision(self, store: RunStore) -> None:
        suspend_for_approval(store)
        store.resolve_approval(RUN, "approval-1", approved=True, response={"note": "ship it"},
                               responded_by="ana", at=at(200))
        run = store.load_run(RUN)
        assert run is not None and run.suspension is not None
        assert run.status is RunStatus.SUSPENDED
        decision = run.suspension.decision
        assert decision is not None
        assert (decision["approved"], decision["response"]) == (True, {"note": "ship it"})

    def test_resolve_approval_with_the_same_answer_is_a_noop(self, store: RunStore) -> None:
        suspend_for_approval(store)
        store.resolve_approval(RUN, "approval-1", approved=False, response="too long",
                               responded_by="ana", at=at(200))
        before = observe(store)
        store.resolve_approval(RUN, "approval-1", approved=False, response="too long",
                               responded_by="bob", at=at(300))
        assert observe(store) == before

    @pytest.mark.parametrize("answer", [(False, "yes"), (True, "no")],
                             ids=["other-approved", "other-response"])
    def test_resolve_approval_with_a_different_answer_raises_approval_conflict(
            self, store: RunStore, answer: tuple[bool, str]) -> None:
        suspend_for_approval(store)
        store.resolve_approval(RUN, "approval-1", approved=True, response="yes",
                               responded_by=None, at=at(200))
        before = observe(store)
        with pytest.raises(ApprovalConflict):
            store.resolve_approval(RUN, "approval-1", approved=answer[0], response=answer[1],
                                   responded_by=None, at=at(300))
        assert observe(store) == before

    @pytest.mark.parametrize("situation", ["created", "running", "other-approval", "other-reason"])
    def test_resolve_approval_needs_the_run_suspended_for_that_approval(
            self, store: RunStore, situation: str) -> None:
        if situation == "created":
            store.create_run(make_run())
        elif situation == "running":
            start_run(store)
        elif situation == "other-approval":
            suspend_for_approval(store, "approval-2")
        else:
            run_in(store, "suspended")
        before = observe(store)
        with pytest.raises(InvalidTransition):
            store.resolve_approval(RUN, "approval-1", approved=True, response=None,
                                   responded_by=None, at=at(200))
        assert observe(store) == before

    @pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
    def test_resolve_approval_on_a_finished_run_raises_run_terminal(
            self, store: RunStore, status: str) -> None:
        suspend_for_approval(store)
        if status == "completed":
            store.resume_run(RUN, owner="o", now=at(200), lease_seconds=60)
            store.complete_run(RUN, expected_attempt=2, output=None, at=at(201))
        elif status == "failed":
            store.fail_run(RUN, expected_attempt=1, error=ERROR, at=at(201))
        else:
            store.cancel_run(RUN, at=at(201))
        before = observe(store)
        with pytest.raises(RunTerminal):
            store.resolve_approval(RUN, "approval-1", approved=True, response=None,
                                   responded_by=None, at=at(300))
        assert observe(store) == before

    def test_resume_run_keeps_the_decision_and_the_next_suspension_replaces_it(
            self, store: RunStore) -> None:
        suspend_for_approval(store)
        store.resolve_approval(RUN, "approval-1", approved=True, response=[1, 2],
                               responded_by="ana", at=at(200))
        suspended = store.load_run(RUN)
        assert suspended is not None and suspended.suspension is not None
        run = store.resume_run(RUN, owner="o", now=at(300), lease_seconds=60)
        assert run.suspension == suspended.suspension
        loaded = store.load_run(RUN)
        assert loaded is not None and loaded.suspension == suspended.suspension
        store.suspend_run(RUN, expected_attempt=2, reason="approval", at=at(310),
                          details={"approval_id": "approval-2"})
        loaded = store.load_run(RUN)
        assert loaded is not None and loaded.suspension is not None
        assert loaded.suspension.decision is None
        assert loaded.suspension.details == {"approval_id": "approval-2"}

    # -- effect ledger --------------------------------------------------------

    def test_begin_effect_returns_a_reserved_record(self, store: RunStore) -> None:
        start_run(store)
        effect = store.begin_effect("call-1", run_id=RUN, expected_attempt=1, at=at(10))
        assert (effect.key, effect.run_id, effect.attempt, effect.status) == (
            "call-1", RUN, 1, EffectStatus.RESERVED)
        assert (effect.result, effect.created_at, effect.completed_at) == (None, at(10), None)
        assert_utc(effect.created_at)

    def test_begin_effect_again_returns_the_stored_record_unchanged(self,
                                                                    store: RunStore) -> None:
        start_run(store)
        first = store.begin_effect("call-1", run_id=RUN, expected_attempt=1, at=at(10))
        assert store.begin_effect("call-1", run_id=RUN, expected_attempt=1, at=at(20)) == first
        store.resume_run(RUN, owner="b", now=at(1000), lease_seconds=60,
                         allow_running_takeover=True)
        assert store.begin_effect("call-1", run_id=RUN, expected_attempt=2, at=at(1010)) == first

    def test_complete_effect_records_the_result(self, store: RunStore) -> None:
        start_run(store)
        store.begin_effect("call-1", run_id=RUN, expected_attempt=1, at=at(10))
        store.complete_effect("call-1", run_id=RUN, expected_attempt=1, result={"ok": 1},
                              at=at(20))
        effect = store.begin_effect("call-1", run_id=RUN, expected_attempt=1, at=at(30))
        assert (effect.status, effect.result, effect.attempt) == (
            EffectStatus.COMPLETED, {"ok": 1}, 1)
        assert (effect.created_at, effect.completed_at) == (at(10), at(20))
        assert_utc(effect.completed_at)

    def test_complete_effect_by_a_later_attempt(self, store: RunStore) -> None:
        start_busy_run(store)
        store.resume_run(RUN, owner="b", now=at(1000), lease_seconds=60,
                         allow_running_takeover=True)
        store.complete_effect(EFFECT_KEY, run_id=RUN, expected_attempt=2, result="r", at=at(1001))
        effect = store.begin_effect(EFFECT_KEY, run_id=RUN, expected_attempt=2, at=at(1002))
        assert (effect.status, effect.result, effect.attempt) == (EffectStatus.COMPLETED, "r", 1)

    def test_complete_effect_with_the_identical_result_is_a_noop(self, store: RunStore) -> None:
        start_busy_run(store)
        store.complete_effect(EFFECT_KEY, run_id=RUN, expected_attempt=1, result=[1], at=at(60))
        first = store.begin_effect(EFFECT_KEY, run_id=RUN, expected_attempt=1, at=at(61))
        before = observe(store)
        store.complete_effect(EFFECT_KEY, run_id=RUN, expected_attempt=1, result=[1], at=at(70))
        assert observe(store) == before
        assert store.begin_effect(EFFECT_KEY, run_id=RUN, expected_attempt=1, at=at(71)) == first

    def test_complete_effect_with_a_different_result_raises_invalid_transition(
            self, store: RunStore) -> None:
        start_busy_run(store)
        store.complete_effect(EFFECT_KEY, run_id=RUN, expected_attempt=1, result=[1], at=at(60))
        first = store.begin_effect(EFFECT_KEY, run_id=RUN, expected_attempt=1, at=at(61))
        before = observe(store)
        with pytest.raises(InvalidTransition):
            store.complete_effect(EFFECT_KEY, run_id=RUN, expected_attempt=1, result=[2],
                                  at=at(70))
        assert observe(store) == before
        assert store.begin_effect(EFFECT_KEY, run_id=RUN, expected_attempt=1, at=at(71)) == first

    def test_complete_effect_of_an_unknown_key_raises_invalid_transition(
            self, store: RunStore) -> None:
        start_busy_run(store)
        before = observe(store)
        with pytest.raises(InvalidTransition):
            store.complete_effect("unknown", run_id=RUN, expected_attempt=1, result=1, at=at(60))
        assert observe(store) == before

    def test_list_effects_returns_the_runs_effects(self, store: RunStore) -> None:
        if not hasattr(store, "list_effects"):
            pytest.skip("the store has no list_effects (not part of the RunStore protocol)")
        start_run(store)
        start_busy_run(store, "other-run")
        reserved = store.begin_effect("b", run_id=RUN, expected_attempt=1, at=at(10))
        store.begin_effect("a", run_id=RUN, expected_attempt=1, at=at(11))
        store.complete_effect("a", run_id=RUN, expected_attempt=1, result="done", at=at(12))
        done = store.begin_effect("a", run_id=RUN, expected_attempt=1, at=at(13))
        assert list_effects(store, RUN) == [done, reserved]
        with pytest.raises(RunNotFound):
            list_effects(store, "missing-run")

    # -- deletion -------------------------------------------------------------

    @pytest.mark.parametrize("status", ["created", "running", "suspended"])
    def test_delete_run_of_a_run_not_finished_raises_invalid_transition(
            self, store: RunStore, status: str) -> None:
        run_in(store, status)
        before = observe(store)
        with pytest.raises(InvalidTransition):
            store.delete_run(RUN)
        assert observe(store) == before

    @pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
    def test_delete_run_removes_the_run_and_all_it_owns(self, store: RunStore,
                                                        status: str) -> None:
        start_busy_run(store, "other-run")
        kept = observe(store, "other-run")
        suspend_for_approval(store)
        store.resolve_approval(RUN, "approval-1", approved=True, response="yes",
                               responded_by=None, at=at(110))
        store.resume_run(RUN, owner="o", now=at(120), lease_seconds=60)
        store.save_checkpoint(make_checkpoint(seq=1, attempt=2), expected_attempt=2)
        store.begin_effect(EFFECT_KEY, run_id=RUN, expected_attempt=2, at=at(121))
        if status == "completed":
            store.complete_run(RUN, expected_attempt=2, output=OUTPUT, at=at(130))
        elif status == "failed":
            store.fail_run(RUN, expected_attempt=2, error=ERROR, at=at(130))
        else:
            store.cancel_run(RUN, at=at(130))
        store.delete_run(RUN)
        assert observe(store) == {"run": None, "latest": None}
        assert store.load_checkpoint(RUN, 1) is None
        with pytest.raises(RunNotFound):
            store.list_checkpoints(RUN)
        assert observe(store, "other-run") == kept
        # The id is free again, and nothing of the deleted run comes back with it.
        suspend_for_approval(store)
        assert store.list_checkpoints(RUN) == []
        store.resolve_approval(RUN, "approval-1", approved=False, response="no",
                               responded_by=None, at=at(210))
        store.resume_run(RUN, owner="o", now=at(220), lease_seconds=60)
        effect = store.begin_effect(EFFECT_KEY, run_id=RUN, expected_attempt=2, at=at(221))
        assert (effect.attempt, effect.status, effect.created_at) == (
            2, EffectStatus.RESERVED, at(221))
        store.save_checkpoint(make_checkpoint(seq=1, attempt=2, variables={}), expected_attempt=2)

    # -- the store object -----------------------------------------------------

    def test_store_is_a_context_manager(self, store: RunStore) -> None:
        assert isinstance(store, AbstractContextManager)
        assert store.__enter__() is store

    @pytest.mark.parametrize("takeover", [False, True], ids=["created", "expired-lease"])
    def test_concurrent_resume_run_exactly_one_wins(self, store: RunStore,
                                                    takeover: bool) -> None:
        store.create_run(make_run())
        if takeover:
            store.resume_run(RUN, owner="dead", now=NOW, lease_seconds=LEASE_SECONDS)
        contenders = 8
        barrier = threading.Barrier(contenders)
        outcomes: list[object] = [None] * contenders

        def reserve(index: int) -> None:
            barrier.wait(timeout=30)
            try:
                outcomes[index] = store.resume_run(
                    RUN, owner=f"worker-{index}", now=at(1000), lease_seconds=LEASE_SECONDS,
                    allow_running_takeover=takeover)
            except Exception as error:  # every outcome is asserted below
                outcomes[index] = error

        threads = [threading.Thread(target=reserve, args=(n,)) for n in range(contenders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        winners = [o for o in outcomes if isinstance(o, RunRecord)]
        losers = [o for o in outcomes if not isinstance(o, RunRecord)]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, LeaseHeld) for o in losers), outcomes
        run = store.load_run(RUN)
        assert run is not None
        assert (run.attempt, run.lease_owner) == (1 + takeover, winners[0].lease_owner)
