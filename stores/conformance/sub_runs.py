"""The contract's rules for a run suspended on a sub-run: the child's end files a
resume request on its parent, and a parent suspending on a child that already
ended files one on itself, so the reconciler finds every parent due by its
request (`list_runs(resume_requested_before=)`), never by reading the runs that
wait.
"""

from __future__ import annotations

import pytest

from stores.base import RunStore
from stores.conformance.builders import ERROR, LEASE_SECONDS, OUTPUT, at, make_run, observe
from stores.records import ParentRef, RunRecord, RunStatus

PARENT = "parent-1"
CHILD = "parent-1.sub-child"
CHILD_FINISHED = "sub-run-finished"


def start(store: RunStore, run_id: str, **fields: object) -> None:
    store.create_run(make_run(run_id, **fields))
    store.resume_run(run_id, owner="owner-1", now=at(0), lease_seconds=LEASE_SECONDS)


def start_family(store: RunStore) -> None:
    """`PARENT` running at attempt 1, and its child `CHILD` running at attempt 1."""
    start(store, PARENT)
    start(store, CHILD, parent=ParentRef(run_id=PARENT, step_path="delegate"))


def suspend_on_child(store: RunStore, *, at_: float = 100, child: str = CHILD,
                     attempt: int = 1) -> None:
    store.suspend_run(PARENT, expected_attempt=attempt, reason="sub-run", at=at(at_),
                      details={"child_run_id": child, "child_reason": "approval",
                               "step_path": "delegate"})


def end(store: RunStore, ending: str, run_id: str = CHILD, *, at_: float = 300) -> None:
    if ending == "complete_run":
        store.complete_run(run_id, expected_attempt=1, output=OUTPUT, at=at(at_))
    elif ending == "fail_run":
        store.fail_run(run_id, expected_attempt=1, error=ERROR, at=at(at_))
    else:
        store.cancel_run(run_id, at=at(at_))


def loaded(store: RunStore, run_id: str) -> RunRecord:
    run = store.load_run(run_id)
    assert run is not None
    return run


def requested(store: RunStore, before: float) -> list[str]:
    page = store.list_runs(resume_requested_before=at(before))
    return [run.run_id for run in page.runs]


ENDINGS = ["complete_run", "fail_run", "cancel_run"]


class SubRunConformance:
    """A sub-run's end and its parent's resume request."""

    @pytest.mark.parametrize("ending", ENDINGS)
    def test_a_sub_runs_end_files_a_resume_request_on_the_parent_suspended_on_it(
            self, store: RunStore, ending: str) -> None:
        start_family(store)
        suspend_on_child(store)
        before = loaded(store, PARENT)
        end(store, ending)
        parent = loaded(store, PARENT)
        assert (parent.resume_requested_at, parent.resume_reason) == (at(300), CHILD_FINISHED)
        assert (parent.status, parent.attempt, parent.suspension) == (
            RunStatus.SUSPENDED, 1, before.suspension)
        assert loaded(store, CHILD).status.terminal
        assert requested(store, before=301) == [PARENT]
        assert requested(store, before=300) == []

    @pytest.mark.parametrize("ending", ENDINGS)
    def test_a_sub_runs_end_leaves_a_parent_not_waiting_on_it_alone(
            self, store: RunStore, ending: str) -> None:
        start_family(store)
        running = observe(store, PARENT)
        end(store, ending)
        assert observe(store, PARENT) == running  # still running: it reads its child itself
        start(store, "other-child", parent=ParentRef(run_id=PARENT, step_path="other"))
        suspend_on_child(store)  # on CHILD, which ended: see the next rule
        store.resume_run(PARENT, owner="o", now=at(400), lease_seconds=LEASE_SECONDS)
        store.suspend_run(PARENT, expected_attempt=2, reason="approval", at=at(410),
                          details={"approval_id": "a", "prompt": "?", "step_path": "ask"})
        waiting = observe(store, PARENT)
        end(store, ending, "other-child", at_=500)
        assert observe(store, PARENT) == waiting  # suspended, but on an approval

    def test_a_parent_keeps_an_earlier_pending_request(self, store: RunStore) -> None:
        start_family(store)
        suspend_on_child(store)
        store.request_resume(PARENT, at=at(200), reason="asked")
        end(store, "complete_run")
        parent = loaded(store, PARENT)
        assert (parent.resume_requested_at, parent.resume_reason) == (at(200), "asked")

    def test_suspending_on_a_child_that_already_ended_files_a_request(
            self, store: RunStore) -> None:
        start_family(store)
        end(store, "complete_run", at_=50)  # after the parent looked, before it suspended
        suspend_on_child(store, at_=100)
        parent = loaded(store, PARENT)
        assert parent.status is RunStatus.SUSPENDED
        assert (parent.resume_requested_at, parent.resume_reason) == (at(100), CHILD_FINISHED)
        assert requested(store, before=101) == [PARENT]

    def test_suspending_on_a_child_still_going_files_nothing(self, store: RunStore) -> None:
        start_family(store)
        suspend_on_child(store)
        parent = loaded(store, PARENT)
        assert (parent.resume_requested_at, parent.resume_reason) == (None, None)
        store.resume_run(PARENT, owner="o", now=at(200), lease_seconds=LEASE_SECONDS)
        suspend_on_child(store, at_=210, child="no-such-child", attempt=2)
        assert loaded(store, PARENT).resume_requested_at is None
        assert requested(store, before=10_000) == []
