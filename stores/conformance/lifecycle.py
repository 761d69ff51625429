"""The contract's rules for a run's life: ids, missing runs, attempts and leases,
fencing and the order of checks, terminal states and cancellation.
"""

from __future__ import annotations

import pytest

from stores.base import (
    InvalidTransition,
    LeaseHeld,
    RunAlreadyExists,
    RunNotFound,
    RunStore,
    RunTerminal,
    StaleAttempt,
)
from stores.conformance.builders import (
    ERROR,
    LEASE_SECONDS,
    NAMING_A_RUN,
    OUTPUT,
    RUN,
    WRITES,
    WRITES_OF_A_RUNNING_RUN,
    assert_utc,
    at,
    finish,
    make_checkpoint,
    make_run,
    observe,
    run_in,
    start_busy_run,
    start_run,
    suspend_for_approval,
)
from stores.records import Budget, ParentRef, RunError, RunStatus


class LifecycleConformance:
    """Run ids, `RunNotFound`, resume and leases, fencing, terminal states, cancel."""

    # -- run ids and missing runs ---------------------------------------------

    def test_create_run_round_trips_every_field(self, store: RunStore) -> None:
        run = make_run(
            manifest={"schemaVersion": "1.0", "steps": [{"id": "a", "type": "prompt"}]},
            variables={"topic": "ünïcode", "n": 1.5}, budget=Budget(max_total_tokens=500),
            parent=ParentRef(run_id="parent-1", step_path="loop/0/child"), tenant="tenant-a",
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
        assert run.takeovers == 1  # the previous owner died running
        assert store.load_run(RUN) == run

    def test_takeover_of_a_confirmed_dead_owner_needs_no_expired_lease(
            self, store: RunStore) -> None:
        start_run(store)  # owner-1 holds the lease until at(60)
        run = store.resume_run(RUN, owner="other", now=at(5), lease_seconds=60,
                               allow_running_takeover=True, expired_owner="owner-1")
        assert (run.status, run.attempt, run.lease_owner, run.lease_expires_at) == (
            RunStatus.RUNNING, 2, "other", at(65))
        assert run.takeovers == 1
        assert store.load_run(RUN) == run

    def test_expired_owner_counts_only_while_it_still_holds_the_lease(
            self, store: RunStore) -> None:
        start_run(store)
        before = observe(store)
        # Another owner than the one confirmed dead holds it: the lease stands.
        with pytest.raises(LeaseHeld):
            store.resume_run(RUN, owner="other", now=at(5), lease_seconds=60,
                             allow_running_takeover=True, expired_owner="owner-9")
        # Confirmed dead, but no takeover asked for: still a held lease.
        with pytest.raises(LeaseHeld):
            store.resume_run(RUN, owner="other", now=at(5), lease_seconds=60,
                             expired_owner="owner-1")
        assert observe(store) == before

    def test_a_checkpoint_resets_takeovers(self, store: RunStore) -> None:
        # `takeovers` counts consecutive takeovers without progress (crash_loop).
        start_run(store, attempts=3)  # two takeovers, no checkpoint in between
        assert observe_takeovers(store) == 2
        store.save_checkpoint(make_checkpoint(seq=1, attempt=3), expected_attempt=3,
                              lease_expires_at=at(3000))
        assert observe_takeovers(store) == 0
        store.save_checkpoint(make_checkpoint(seq=2, attempt=3), expected_attempt=3)
        run = store.resume_run(RUN, owner="owner-4", now=at(5000), lease_seconds=LEASE_SECONDS,
                               allow_running_takeover=True)
        assert run.takeovers == observe_takeovers(store) == 1
        # A checkpoint that comes with a state change resets it too.
        store.suspend_run(RUN, expected_attempt=4, reason="interrupted", details={},
                          at=at(5001), checkpoint=make_checkpoint(seq=3, attempt=4))
        assert observe_takeovers(store) == 0

    def test_resuming_a_crash_loop_suspension_starts_the_takeover_count_again(
            self, store: RunStore) -> None:
        # A reconciler suspends a run whose owners keep dying; an operator's resume
        # after the fix gets the full allowance of takeovers again.
        start_run(store, attempts=3)
        store.suspend_run(RUN, expected_attempt=3, reason="crash-loop", details={},
                          at=at(5000))
        assert observe_takeovers(store) == 2
        run = store.resume_run(RUN, owner="o", now=at(5001), lease_seconds=60)
        assert run.takeovers == observe_takeovers(store) == 0

    def test_resume_run_from_suspended_is_not_a_takeover(self, store: RunStore) -> None:
        suspend_for_approval(store)
        run = store.resume_run(RUN, owner="o", now=at(100), lease_seconds=60)
        assert run.takeovers == 0

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


def observe_takeovers(store: RunStore) -> int:
    run = store.load_run(RUN)
    assert run is not None
    return run.takeovers
