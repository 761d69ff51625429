"""The slices of an attempt on DynamoDbRunStore (stores/dynamodb/slices.py).

A first slice reserves its attempt only while the run has not reached it; a
later slice claims the lease its predecessor handed to its execution; a slice
hands the lease to the next execution only while it holds it, and from then
on its writes are refused. Interleavings are deterministic: another owner's
whole operation runs just before this one's first write (`interleave`, as in
test_dynamodb_fencing.py), on its own client, as another Lambda would.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from aws_template import REGION, AwsResources
from conftest import open_store
from test_dynamodb_fencing import interleave

from stores.base import LeaseHeld, StaleAttempt
from stores.conformance import LEASE_SECONDS, RUN, at, make_checkpoint, make_run
from stores.dynamodb import slices
from stores.dynamodb.store import DynamoDbRunStore
from stores.records import RunStatus

EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:run:run-1-a1"
NEXT = "arn:aws:states:us-east-1:123456789012:execution:run:run-1-a1-s2"
FIRST_SLICE = slices.slice_owner(EXECUTION, "invocation-1")
SIBLING = slices.slice_owner(EXECUTION, "invocation-2")


@pytest.fixture(scope="module")
def other_client(aws_account: AwsResources) -> Any:
    return boto3.session.Session().client("dynamodb", region_name=REGION)


@pytest.fixture
def store(aws: AwsResources) -> DynamoDbRunStore:
    store = open_store(aws)
    store.create_run(make_run())
    return store


def reserve(store: DynamoDbRunStore, owner: str = FIRST_SLICE, *, attempt: int = 1,
            seconds: float = 0, takeover: bool = False) -> Any:
    return slices.reserve_slice(store, RUN, attempt=attempt, owner=owner, now=at(seconds),
                                lease_seconds=LEASE_SECONDS, takeover=takeover)


def hand_over(store: DynamoDbRunStore, owner: str = FIRST_SLICE, *, seconds: float = 10,
              attempt: int = 1) -> bool:
    return slices.hand_over_slice(store, RUN, expected_attempt=attempt, owner=owner,
                                  successor=NEXT, now=at(seconds), lease_seconds=LEASE_SECONDS)


def claim(store: DynamoDbRunStore, execution: str, owner: str, *, seconds: float = 20) -> None:
    slices.claim_slice(store, RUN, expected_attempt=1, execution=execution, owner=owner,
                       now=at(seconds), lease_seconds=LEASE_SECONDS)


def test_the_first_slice_reserves_its_attempt_once(store: DynamoDbRunStore) -> None:
    reserved = reserve(store)
    assert reserved is not None and (reserved.attempt, reserved.lease_owner) == (1, FIRST_SLICE)
    assert store.load_run(RUN) == reserved
    # A duplicate invocation of the same first slice: nothing reserved again.
    assert reserve(store, SIBLING, seconds=5) is None
    assert store.load_run(RUN) == reserved
    # Its claim finds the sibling's live lease.
    with pytest.raises(LeaseHeld) as held:
        claim(store, EXECUTION, SIBLING)
    assert held.value.owner == FIRST_SLICE
    # Nor is an attempt past the next one ever reserved.
    with pytest.raises(StaleAttempt):
        reserve(store, attempt=3)


def test_a_takeover_by_a_first_slice_needs_the_lease_to_have_expired(
        store: DynamoDbRunStore) -> None:
    reserve(store)
    with pytest.raises(LeaseHeld):
        reserve(store, "takeover#1", attempt=2, seconds=30, takeover=True)
    with pytest.raises(LeaseHeld):  # no takeover asked for: never
        reserve(store, "start#1", attempt=2, seconds=LEASE_SECONDS + 1)
    taken = reserve(store, "takeover#1", attempt=2, seconds=LEASE_SECONDS + 1, takeover=True)
    assert taken is not None and (taken.attempt, taken.takeovers) == (2, 1)


def test_a_hand_over_leaves_the_attempt_to_the_next_execution_and_fences_the_slice(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    reserve(store)
    held = store.owned_by(RUN, FIRST_SLICE)
    held.save_checkpoint(make_checkpoint(RUN, 1, 1), expected_attempt=1,
                         lease_expires_at=at(5 + LEASE_SECONDS))
    assert hand_over(store)
    handed = store.load_run(RUN)
    assert handed is not None
    # Renewed by the hand-over: the next execution has a whole lease to claim it in.
    assert (handed.lease_owner, handed.lease_expires_at) == (NEXT, at(10 + LEASE_SECONDS))
    assert (handed.status, handed.attempt, handed.checkpoint_seq) == (RunStatus.RUNNING, 1, 1)
    # The slice that handed it over writes nothing more, and hands nothing over again.
    with pytest.raises(StaleAttempt):
        held.save_checkpoint(make_checkpoint(RUN, 2, 1), expected_attempt=1)
    assert not hand_over(store, seconds=11)
    # A late duplicate of the first slice finds the next execution's lease.
    with pytest.raises(LeaseHeld) as late:
        claim(store, EXECUTION, SIBLING)
    assert late.value.owner == NEXT
    # The next slice claims it, even once expired (its execution waited for Lambda).
    second = slices.slice_owner(NEXT, "invocation-1")
    claim(store, NEXT, second, seconds=10 + LEASE_SECONDS + 30)
    claimed = open_store(aws).load_run(RUN)
    assert claimed is not None and claimed.lease_owner == second
    store.owned_by(RUN, second).save_checkpoint(make_checkpoint(RUN, 2, 1), expected_attempt=1)


def test_of_a_hand_over_and_a_takeover_from_the_same_read_exactly_one_lands(
        aws: AwsResources, store: DynamoDbRunStore, other_client: Any) -> None:
    reserve(store)
    reconciler = open_store(aws, client=other_client)

    def taken_over() -> None:
        reconciler.resume_run(RUN, owner="takeover", now=at(LEASE_SECONDS + 1),
                              lease_seconds=LEASE_SECONDS, allow_running_takeover=True)

    with interleave(store, taken_over), pytest.raises(StaleAttempt):
        hand_over(store, seconds=LEASE_SECONDS + 1)
    run = open_store(aws).load_run(RUN)
    assert run is not None and (run.attempt, run.lease_owner) == (2, "takeover")


def test_of_two_duplicate_first_slices_from_the_same_read_exactly_one_reserves(
        aws: AwsResources, store: DynamoDbRunStore, other_client: Any) -> None:
    duplicate = open_store(aws, client=other_client)
    won: list[Any] = []
    with interleave(store, lambda: won.append(reserve(duplicate, SIBLING))):
        # Decided again on what the refusal returned: the attempt is reached.
        assert reserve(store) is None
    run = open_store(aws).load_run(RUN)
    assert run is not None and (run.attempt, run.lease_owner) == (1, SIBLING)
    assert won == [run]
