"""The contract's rules for the effect ledger, deletion, and the store object
itself (a context manager that lets exactly one concurrent `resume_run` win).
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager

import pytest

from stores.base import (
    InvalidTransition,
    LeaseHeld,
    RunNotFound,
    RunStore,
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
from stores.records import EffectStatus, RunRecord


class QueryConformance:
    """Effects, `delete_run`, the context manager, concurrency."""

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
