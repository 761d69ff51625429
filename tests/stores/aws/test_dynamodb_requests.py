"""The request budget, counted with botocore's `before-call` hooks.

An owner's save_checkpoint of a small checkpoint is one DynamoDB request (a
TransactWriteItems) and a large one adds exactly one S3 PutObject; the
reconciler's list_runs(lease_expired_before=..., resume_requested_before=...)
Queries the status GSI, list_runs(tenant=...) the tenant GSI, and none Scans.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from aws_template import AwsResources
from conftest import open_store, unique

from stores.conformance import NOW, RUN, at, make_checkpoint, make_run, start_run
from stores.dynamodb.items import STATUS_INDEX, STATUS_SHARDS, TENANT_INDEX
from stores.dynamodb.store import DynamoDbRunStore
from stores.records import CheckpointBudget, RunStatus


@contextmanager
def requests(*clients: Any) -> Iterator[Counter[str]]:
    """Count the API calls `clients` make, as "service:Operation"."""
    counted: Counter[str] = Counter()
    lock = threading.Lock()  # the status index's partitions are queried from threads

    def count(model: Any, **_: Any) -> None:
        with lock:
            counted[f"{model.service_model.service_name}:{model.name}"] += 1

    for client in clients:
        client.meta.events.register("before-call", count)
    try:
        yield counted
    finally:
        for client in clients:
            client.meta.events.unregister("before-call", count)


@contextmanager
def queries(client: Any) -> Iterator[list[dict[str, Any]]]:
    """The parameters of every Query `client` makes."""
    made: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        made.append(dict(params))

    client.meta.events.register("before-parameter-build.dynamodb.Query", record)
    try:
        yield made
    finally:
        client.meta.events.unregister("before-parameter-build.dynamodb.Query", record)


@pytest.fixture
def store(aws: AwsResources) -> DynamoDbRunStore:
    return open_store(aws, prefix=f"{unique('test')}/")


def checkpoint(seq: int, entry_bytes: int = 200) -> Any:
    transcript = [{"role": "assistant", "n": n, "content": "x" * entry_bytes}
                  for n in range(1, seq + 1)]
    # The token limit of `make_run`'s record, as a run's checkpoints carry it: one that
    # differs is written to the run's record text, which the one-request save leaves be.
    return make_checkpoint(seq=seq, transcript=transcript,
                           budget=CheckpointBudget(consumed_tokens=100 * seq))


def test_saving_a_small_checkpoint_is_one_dynamodb_request(aws: AwsResources,
                                                            store: DynamoDbRunStore) -> None:
    start_run(store)
    for seq in (1, 2, 3):
        with requests(aws.dynamodb, aws.s3) as counted:
            store.save_checkpoint(checkpoint(seq), expected_attempt=1,
                                  lease_expires_at=at(60 + seq))
        assert counted == {"dynamodb:TransactWriteItems": 1}, (seq, counted)
    run = store.load_run(RUN)
    assert run is not None and (run.checkpoint_seq, run.lease_expires_at) == (3, at(63))


def test_a_resumed_owner_saves_in_one_request_after_loading_its_checkpoint(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    start_run(store)
    store.save_checkpoint(checkpoint(1), expected_attempt=1)
    successor = open_store(aws, prefix=store.blobs.prefix)
    with requests(aws.dynamodb, aws.s3) as resuming:
        successor.resume_run(RUN, owner="b", now=at(1000), lease_seconds=60,
                             allow_running_takeover=True)
        assert successor.load_latest_checkpoint(RUN) == checkpoint(1)
    with requests(aws.dynamodb, aws.s3) as saving:
        successor.save_checkpoint(checkpoint(2), expected_attempt=2)
    assert saving == {"dynamodb:TransactWriteItems": 1}
    print(f"\nresume + load (cold store): {dict(resuming)}")


def test_a_large_checkpoint_adds_exactly_one_s3_put(aws: AwsResources,
                                                    store: DynamoDbRunStore) -> None:
    start_run(store)
    store.save_checkpoint(checkpoint(1), expected_attempt=1)
    # 300,000 hex digits of hashes: compressed, still far over the inline limit.
    noise = "".join(hashlib.sha256(n.to_bytes(4, "big")).hexdigest() for n in range(4_688))
    large = make_checkpoint(seq=2, transcript=[*checkpoint(1).transcript,
                                                {"role": "tool", "content": noise}],
                            budget=checkpoint(2).budget)
    with requests(aws.dynamodb, aws.s3) as counted:
        store.save_checkpoint(large, expected_attempt=1)
    assert counted == {"dynamodb:TransactWriteItems": 1, "s3:PutObject": 1}
    assert store.load_latest_checkpoint(RUN) == large


def test_the_reconcilers_list_runs_queries_the_index_and_never_scans(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    for n in range(30):
        store.create_run(make_run(f"run-{n:02d}", created_at=at(-3600 if n % 3 else 3600)))
        if n % 2:
            store.resume_run(f"run-{n:02d}", owner="o", now=NOW, lease_seconds=60 * (n % 4))
    with requests(aws.dynamodb) as counted:
        page = store.list_runs(lease_expired_before=at(120), limit=100)
    expected = sorted(f"run-{n:02d}" for n in range(30)
                      if (n % 2 and 60 * (n % 4) < 120) or (not n % 2 and n % 3))
    assert [run.run_id for run in page.runs] == expected
    # running and created: one Query per partition of each.
    assert counted == {"dynamodb:Query": 2 * STATUS_SHARDS, "dynamodb:BatchGetItem": 1}, counted
    with requests(aws.dynamodb) as everything:
        assert len(store.list_runs(limit=100).runs) == 30
    assert "dynamodb:Scan" not in everything
    print(f"\nlist_runs(lease_expired_before): {dict(counted)}; all runs: {dict(everything)}")


def test_list_runs_of_a_tenant_queries_the_tenant_index_and_never_scans(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    for n in range(30):
        store.create_run(make_run(f"run-{n:02d}", tenant="other" if n % 3 == 0 else "t"))
    expected = sorted((f"run-{n:02d}" for n in range(30) if n % 3), reverse=True)
    seen: list[str] = []
    cursor = None
    with requests(aws.dynamodb) as counted, queries(aws.dynamodb) as made:
        for _ in range(len(expected)):
            page = store.list_runs(tenant="t", newest_first=True, limit=7, cursor=cursor)
            seen += [run.run_id for run in page.runs]
            cursor = page.cursor
            if cursor is None:
                break
    assert seen == expected
    pages = -(-len(expected) // 7)
    assert counted == {"dynamodb:Query": pages, "dynamodb:BatchGetItem": pages}, counted
    assert {(query["IndexName"], query["ScanIndexForward"]) for query in made} == {
        (TENANT_INDEX, False)}
    with requests(aws.dynamodb) as oldest_first:
        page = store.list_runs(tenant="t", statuses={RunStatus.CREATED}, limit=100)
    assert [run.run_id for run in page.runs] == sorted(expected)
    assert "dynamodb:Scan" not in oldest_first


def test_the_reconcilers_resume_requests_come_from_the_status_index_and_only_those_are_read(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    for n in range(20):
        run_id = f"run-{n:02d}"
        store.create_run(make_run(run_id))
        store.resume_run(run_id, owner="o", now=NOW, lease_seconds=60)
        store.suspend_run(run_id, expected_attempt=1, reason="sub-run", details={}, at=at(1))
        if n % 4 == 0:
            store.request_resume(run_id, at=at(10 + n), reason="sub-run-finished")
    read: list[int] = []

    def count_keys(params: dict[str, Any], **_: Any) -> None:
        read.extend(len(table["Keys"]) for table in params["RequestItems"].values())

    aws.dynamodb.meta.events.register("before-parameter-build.dynamodb.BatchGetItem", count_keys)
    try:
        with requests(aws.dynamodb) as counted, queries(aws.dynamodb) as made:
            page = store.list_runs(resume_requested_before=at(100), limit=100)
    finally:
        aws.dynamodb.meta.events.unregister("before-parameter-build.dynamodb.BatchGetItem",
                                            count_keys)
    assert [run.run_id for run in page.runs] == [f"run-{n:02d}" for n in range(0, 20, 4)]
    # One Query per partition of the suspended status.
    assert counted == {"dynamodb:Query": STATUS_SHARDS, "dynamodb:BatchGetItem": 1}, counted
    assert [query["IndexName"] for query in made] == [STATUS_INDEX] * STATUS_SHARDS
    # Suspended runs nobody asked to resume are not in the key range: only the
    # five requested runs are read (META and definition each).
    assert read == [2 * 5]


def test_effects_cost_one_request_to_begin(aws: AwsResources, store: DynamoDbRunStore) -> None:
    start_run(store)
    with requests(aws.dynamodb) as began:
        store.begin_effect("call-1", run_id=RUN, expected_attempt=1, at=at(1))
    with requests(aws.dynamodb) as completed:
        store.complete_effect("call-1", run_id=RUN, expected_attempt=1, result="ok", at=at(2))
    assert began == {"dynamodb:TransactWriteItems": 1}
    assert completed == {"dynamodb:GetItem": 1, "dynamodb:TransactWriteItems": 1}
