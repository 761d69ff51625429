"""The contract's rules for everything around a run's progress: `list_runs`
filters and paging, approvals, the effect ledger, deletion, and the store object
itself (a context manager that lets exactly one concurrent `resume_run` win).
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any

import pytest

from stores.base import (
    ApprovalConflict,
    InvalidTransition,
    LeaseHeld,
    RunNotFound,
    RunStore,
    RunTerminal,
)
from stores.conformance.builders import (
    EFFECT_KEY,
    ERROR,
    LEASE_SECONDS,
    NOW,
    OUTPUT,
    RUN,
    assert_utc,
    at,
    list_effects,
    make_checkpoint,
    make_run,
    observe,
    run_in,
    start_busy_run,
    start_run,
    suspend_for_approval,
)
from stores.records import EffectStatus, ParentRef, RunRecord, RunStatus


class QueryConformance:
    """`list_runs`, approvals, effects, `delete_run`, the context manager, concurrency."""

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
