"""The contract's rules for answering a suspended run and asking it to go on:
`resolve_approval` (an approval, or how to settle an unknown effect) and the
resume outbox (`request_resume`, cleared by `resume_run`).
"""

from __future__ import annotations

import pytest

from stores.base import ApprovalConflict, InvalidTransition, RunStore, RunTerminal
from stores.conformance.builders import (
    ERROR,
    LEASE_SECONDS,
    RUN,
    UNKNOWN_EFFECT,
    assert_utc,
    at,
    make_run,
    observe,
    run_in,
    start_run,
    suspend_for_approval,
    suspend_for_effect,
)
from stores.records import RunRecord, RunStatus


class AnswerConformance:
    """Approvals, answers to unknown effects, resume requests."""

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

    @pytest.mark.parametrize("situation", ["created", "running", "other-approval", "other-reason",
                                           "other-effect", "key-of-an-approval",
                                           "approval-id-of-an-effect"])
    def test_resolve_approval_needs_the_run_suspended_for_that_approval(
            self, store: RunStore, situation: str) -> None:
        if situation == "created":
            store.create_run(make_run())
        elif situation == "running":
            start_run(store)
        elif situation == "other-approval":
            suspend_for_approval(store, "approval-2")
        elif situation == "other-effect":
            suspend_for_effect(store, "call-9")
        elif situation == "key-of-an-approval":  # the question is named by the reason's detail
            suspend_for_approval(store, "approval-2", key="approval-1")
        elif situation == "approval-id-of-an-effect":
            suspend_for_effect(store, "call-9", approval_id="approval-1")
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

    # -- unknown effects --------------------------------------------------------

    def test_resolve_approval_answers_an_unknown_effect(self, store: RunStore) -> None:
        suspend_for_effect(store)
        answer = {"action": "result", "result": {"deleted": 3}}
        store.resolve_approval(RUN, UNKNOWN_EFFECT, approved=True, response=answer,
                               responded_by="ana", at=at(200))
        run = store.load_run(RUN)
        assert run is not None and run.suspension is not None
        assert (run.status, run.attempt, run.suspension.reason) == (
            RunStatus.SUSPENDED, 1, "effect-unknown")
        decision = run.suspension.decision
        assert decision is not None
        assert (decision["approved"], decision["response"]) == (True, answer)
        assert (run.resume_requested_at, run.resume_reason) == (at(200), "approval-recorded")
        resumed = store.resume_run(RUN, owner="o", now=at(300), lease_seconds=LEASE_SECONDS)
        assert resumed.suspension == run.suspension

    def test_an_unknown_effects_answer_again_is_a_noop_and_another_conflicts(
            self, store: RunStore) -> None:
        suspend_for_effect(store)
        store.resolve_approval(RUN, UNKNOWN_EFFECT, approved=True, response={"action": "retry"},
                               responded_by="ana", at=at(200))
        before = observe(store)
        store.resolve_approval(RUN, UNKNOWN_EFFECT, approved=True, response={"action": "retry"},
                               responded_by="bob", at=at(300))
        assert observe(store) == before
        for approved, action in [(True, "skip"), (False, "retry")]:
            with pytest.raises(ApprovalConflict):
                store.resolve_approval(RUN, UNKNOWN_EFFECT, approved=approved,
                                       response={"action": action}, responded_by=None,
                                       at=at(300))
            assert observe(store) == before

    # -- the resume outbox ------------------------------------------------------

    def test_request_resume_files_a_request_on_a_suspended_run(self, store: RunStore) -> None:
        run_in(store, "suspended")
        before = observe(store)
        store.request_resume(RUN, at=at(200), reason="sub-run-finished")
        after = observe(store)
        run, suspended = after.pop("run"), before.pop("run")
        assert isinstance(run, RunRecord) and isinstance(suspended, RunRecord)
        assert (run.resume_requested_at, run.resume_reason) == (at(200), "sub-run-finished")
        assert_utc(run.resume_requested_at)
        assert (run.status, run.attempt, run.suspension) == (
            RunStatus.SUSPENDED, 1, suspended.suspension)
        assert after == before  # checkpoints and effects untouched

    def test_request_resume_keeps_the_earliest_pending_request(self, store: RunStore) -> None:
        run_in(store, "suspended")
        store.request_resume(RUN, at=at(200), reason="first")
        before = observe(store)
        for later in (200, 201, 5000):  # asking again never pushes the request out
            store.request_resume(RUN, at=at(later), reason="again")
            assert observe(store) == before
        store.request_resume(RUN, at=at(150), reason="earlier")
        run = store.load_run(RUN)
        assert run is not None
        assert (run.resume_requested_at, run.resume_reason) == (at(150), "earlier")
        assert (run.status, run.attempt) == (RunStatus.SUSPENDED, 1)

    @pytest.mark.parametrize(("status", "error"), [
        ("created", InvalidTransition), ("running", InvalidTransition),
        ("completed", RunTerminal), ("failed", RunTerminal), ("cancelled", RunTerminal)])
    def test_request_resume_needs_a_suspended_run(self, store: RunStore, status: str,
                                                  error: type[Exception]) -> None:
        run_in(store, status)
        before = observe(store)
        with pytest.raises(error):
            store.request_resume(RUN, at=at(200), reason="sub-run-finished")
        assert observe(store) == before

    def test_resolve_approval_files_a_resume_request(self, store: RunStore) -> None:
        suspend_for_approval(store)
        store.resolve_approval(RUN, "approval-1", approved=True, response=None,
                               responded_by=None, at=at(200))
        run = store.load_run(RUN)
        assert run is not None
        assert (run.resume_requested_at, run.resume_reason) == (at(200), "approval-recorded")
        assert (run.status, run.attempt) == (RunStatus.SUSPENDED, 1)

    def test_resolve_approval_keeps_an_earlier_pending_request(self, store: RunStore) -> None:
        suspend_for_approval(store)
        store.request_resume(RUN, at=at(150), reason="asked")
        store.resolve_approval(RUN, "approval-1", approved=True, response=None,
                               responded_by=None, at=at(200))
        run = store.load_run(RUN)
        assert run is not None and run.suspension is not None
        assert run.suspension.decision is not None
        assert (run.resume_requested_at, run.resume_reason) == (at(150), "asked")

    def test_resume_run_clears_the_request(self, store: RunStore) -> None:
        suspend_for_approval(store)
        store.resolve_approval(RUN, "approval-1", approved=True, response=None,
                               responded_by=None, at=at(200))
        resumed = store.resume_run(RUN, owner="o", now=at(300), lease_seconds=LEASE_SECONDS)
        assert (resumed.resume_requested_at, resumed.resume_reason) == (None, None)
        loaded = store.load_run(RUN)
        assert loaded is not None
        assert (loaded.resume_requested_at, loaded.resume_reason) == (None, None)
        # Suspended again, the run takes a new request at any time.
        store.suspend_run(RUN, expected_attempt=2, reason="sub-run", at=at(310), details={})
        store.request_resume(RUN, at=at(400), reason="sub-run-finished")
        loaded = store.load_run(RUN)
        assert loaded is not None and loaded.resume_requested_at == at(400)

    @pytest.mark.parametrize("ending", ["cancel_run", "fail_run"])
    def test_a_finished_run_keeps_no_request(self, store: RunStore, ending: str) -> None:
        run_in(store, "suspended")
        store.request_resume(RUN, at=at(200), reason="sub-run-finished")
        if ending == "cancel_run":
            store.cancel_run(RUN, at=at(300))
        else:
            store.fail_run(RUN, expected_attempt=1, error=ERROR, at=at(300))
        run = store.load_run(RUN)
        assert run is not None and run.status.terminal
        assert (run.resume_requested_at, run.resume_reason) == (None, None)
