"""Fencing by deterministic interleavings.

moto does not make a condition and its write atomic, so a thread race there
proves nothing. Instead another owner's whole operation is run at an exact
point of this owner's: just before its first write request, after it read the
run (`Interleave`, a botocore `before-call` hook on this owner's client).
Each owner is its own store on its own client, with its own memory of the
run, as two processes would be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from aws_template import REGION, AwsResources
from conftest import open_store

from stores.base import LeaseHeld, StaleAttempt
from stores.conformance import (
    LEASE_SECONDS,
    NOW,
    RUN,
    WRITES,
    at,
    make_checkpoint,
    make_run,
    observe,
    start_busy_run,
    suspend_for_approval,
)
from stores.dynamodb.store import DynamoDbRunStore
from stores.records import ParentRef, RunStatus

WRITE_OPERATIONS = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"}


@pytest.fixture(scope="module")
def owner_clients(aws_account: AwsResources) -> tuple[Any, Any]:
    """Two more DynamoDB clients: one per owner, so a hook on one leaves the other alone."""
    session = boto3.session.Session()
    return (session.client("dynamodb", region_name=REGION),
            session.client("dynamodb", region_name=REGION))


@pytest.fixture
def owners(aws: AwsResources,
           owner_clients: tuple[Any, Any]) -> tuple[DynamoDbRunStore, DynamoDbRunStore]:
    return open_store(aws, client=owner_clients[0]), open_store(aws, client=owner_clients[1])


@contextmanager
def interleave(store: DynamoDbRunStore, between: Callable[[], None]) -> Iterator[list[str]]:
    """Run `between` once, just before `store`'s first write request; yield the
    operations `store` sent, in order."""
    sent: list[str] = []

    def hook(model: Any, **_: Any) -> None:
        first_write = model.name in WRITE_OPERATIONS and not WRITE_OPERATIONS & set(sent)
        sent.append(model.name)
        if first_write:
            between()

    store.client.meta.events.register("before-call.dynamodb", hook)
    try:
        yield sent
    finally:
        store.client.meta.events.unregister("before-call.dynamodb", hook)


@pytest.mark.parametrize("state", ["created", "suspended", "expired-lease"])
def test_of_two_owners_resuming_from_the_same_read_exactly_one_wins(
        aws: AwsResources, owners: tuple[DynamoDbRunStore, DynamoDbRunStore],
        state: str) -> None:
    first, second = owners
    takeover = state == "expired-lease"
    if state == "suspended":
        suspend_for_approval(first)
    else:
        first.create_run(make_run())
        if takeover:
            first.resume_run(RUN, owner="dead", now=NOW, lease_seconds=LEASE_SECONDS)
    before = first.load_run(RUN)
    assert before is not None
    won: list[object] = []

    def second_resumes() -> None:
        won.append(second.resume_run(RUN, owner="second", now=at(1000), lease_seconds=60,
                                     allow_running_takeover=takeover))

    with interleave(first, second_resumes) as sent, pytest.raises(LeaseHeld):
        first.resume_run(RUN, owner="first", now=at(1000), lease_seconds=60,
                         allow_running_takeover=takeover)
    # The first owner read before the second wrote, then wrote once and was refused.
    assert sent[0] in {"GetItem", "Query"} and sent.count("PutItem") == 1, sent
    assert len(won) == 1
    run = open_store(aws).load_run(RUN)
    assert run is not None
    assert (run.status, run.attempt, run.lease_owner) == (
        RunStatus.RUNNING, before.attempt + 1, "second")
    assert run == won[0]


@pytest.mark.parametrize("when", ["interleaved", "afterwards"])
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_superseded_owners_every_write_raises_stale_attempt_and_changes_nothing(
        aws: AwsResources, owners: tuple[DynamoDbRunStore, DynamoDbRunStore], write: str,
        when: str) -> None:
    stale, successor = owners
    observer = open_store(aws)
    start_busy_run(stale)  # attempt 1, with a checkpoint and an effect, remembered by `stale`
    seen: dict[str, object] = {}

    def take_over() -> None:
        successor.resume_run(RUN, owner="successor", now=at(1000), lease_seconds=60,
                             allow_running_takeover=True)
        seen["before"] = observe(observer)

    if when == "afterwards":
        take_over()  # the stale owner still remembers attempt 1 as current
    between = take_over if when == "interleaved" else lambda: None
    with interleave(stale, between) as sent, pytest.raises(StaleAttempt):
        WRITES[write](stale, RUN, 1)
    assert observe(observer) == seen["before"]
    if when == "interleaved":
        # The write was decided on the old state, sent, and refused by its condition.
        assert any(name in WRITE_OPERATIONS for name in sent), sent
    run = observer.load_run(RUN)
    assert run is not None and (run.attempt, run.lease_owner) == (2, "successor")


def test_a_decision_recorded_between_a_resumes_read_and_its_write_is_kept(
        aws: AwsResources, owners: tuple[DynamoDbRunStore, DynamoDbRunStore]) -> None:
    # The resume's condition holds on attempt and status alone; only the
    # revision shows that the suspension changed under it.
    resumer, approver = owners
    suspend_for_approval(resumer)

    def approve() -> None:
        approver.resolve_approval(RUN, "approval-1", approved=True, response="ship it",
                                  responded_by="ana", at=at(150))

    with interleave(resumer, approve) as sent:
        run = resumer.resume_run(RUN, owner="o", now=at(200), lease_seconds=60)
    assert sent.count("PutItem") == 2, sent  # refused once, then written on the new image
    assert run.suspension is not None and run.suspension.decision is not None
    assert run.suspension.decision["response"] == "ship it"
    assert open_store(aws).load_run(RUN) == run


def test_a_checkpoint_saved_between_a_suspends_read_and_its_write_is_kept(
        aws: AwsResources, owners: tuple[DynamoDbRunStore, DynamoDbRunStore]) -> None:
    # Two writers of one attempt (a heartbeat thread beside the engine): the
    # suspension must not move checkpoint_seq back over the new checkpoint.
    engine, helper = owners
    start_busy_run(engine)
    helper.load_latest_checkpoint(RUN)

    def save() -> None:
        helper.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1)

    with interleave(engine, save):
        engine.suspend_run(RUN, expected_attempt=1, reason="sub-run", details={}, at=at(100))
    run = open_store(aws).load_run(RUN)
    assert run is not None and (run.status, run.checkpoint_seq) == (RunStatus.SUSPENDED, 2)
    assert [info.seq for info in open_store(aws).list_checkpoints(RUN)] == [1, 2]


def test_a_write_retried_after_its_answer_was_lost_is_not_refused_by_itself(
        aws: AwsResources, monkeypatch: pytest.MonkeyPatch) -> None:
    # botocore retries a request whose answer it lost; a conditional write that
    # had landed then meets itself. Each write is sent twice here: the second
    # is refused, and the token the write set shows that it was this one.
    store = open_store(aws)
    send = store._table.transact

    def sent_twice(ops: Any) -> None:
        send(ops)
        send(ops)

    monkeypatch.setattr(store._table, "transact", sent_twice)
    store.create_run(make_run())
    run = store.resume_run(RUN, owner="o", now=NOW, lease_seconds=60)
    store.save_checkpoint(make_checkpoint(seq=1), expected_attempt=1, lease_expires_at=at(99))
    store.renew_lease(RUN, expected_attempt=1, now=at(10), lease_seconds=60)
    store.complete_run(RUN, expected_attempt=1, output="done", at=at(20),
                       checkpoint=make_checkpoint(seq=2))
    loaded = open_store(aws).load_run(RUN)
    assert loaded is not None
    assert (loaded.status, loaded.attempt, loaded.checkpoint_seq, loaded.output) == (
        RunStatus.COMPLETED, run.attempt, 2, "done")


# -- a sub-run's end and its parent's suspension on it ---------------------------

PARENT, CHILD = "parent-1", "parent-1.sub-child"


def family(store: DynamoDbRunStore) -> None:
    """PARENT and its child CHILD, both running at attempt 1."""
    for run_id, parent in ((PARENT, None), (CHILD, ParentRef(run_id=PARENT, step_path="d"))):
        store.create_run(make_run(run_id, parent=parent))
        store.resume_run(run_id, owner="owner-1", now=NOW, lease_seconds=LEASE_SECONDS)


def suspend_parent(store: DynamoDbRunStore) -> None:
    store.suspend_run(PARENT, expected_attempt=1, reason="sub-run", at=at(100),
                      details={"child_run_id": CHILD, "step_path": "d"})


def complete_child(store: DynamoDbRunStore) -> None:
    store.complete_run(CHILD, expected_attempt=1, output="done", at=at(90))


@pytest.mark.parametrize("first", ["parent-suspends", "child-ends"])
def test_a_childs_end_and_its_parents_suspension_on_it_never_miss_each_other(
        aws: AwsResources, owners: tuple[DynamoDbRunStore, DynamoDbRunStore],
        first: str) -> None:
    """Each decides on a read of the other taken before the other's write lands (the
    parent sees its child going on, the child its parent running): the transaction
    that carries the stale read is refused by its check of the other, and decided
    again."""
    parents, children = owners
    family(parents)
    if first == "parent-suspends":
        with interleave(parents, lambda: complete_child(children)) as sent:
            suspend_parent(parents)
    else:
        with interleave(children, lambda: suspend_parent(parents)) as sent:
            complete_child(children)
    # The first write (a transaction: the run and a check of the other) is refused.
    writes = [name for name in sent if name in WRITE_OPERATIONS]
    assert (len(writes), writes[0]) == (2, "TransactWriteItems")
    parent = parents.load_run(PARENT)
    assert parent is not None and parent.status is RunStatus.SUSPENDED
    assert parent.resume_reason == "sub-run-finished"
    assert parent.resume_requested_at == (at(100) if first == "parent-suspends" else at(90))
    assert [run.run_id for run in parents.list_runs(resume_requested_before=at(101)).runs] \
        == [PARENT]
