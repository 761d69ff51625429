"""The DynamoDB store answers an operator's search with Queries of its indexes,
never a Scan (issue 39, acceptance 3): a tenant's search by agent and time range
is one Query of `by-agent` (the time range its filter) and one BatchGetItem of
the page; an id prefix narrows the Query's key range. Requests are counted with
botocore's `before-call` hook."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from aws_template import AwsResources
from conftest import open_store, unique

from stores.conformance import NOW, make_run
from stores.dynamodb.items import AGENT_INDEX, TENANT_INDEX
from stores.dynamodb.store import DynamoDbRunStore

RUNS = 300
AGENTS = 6


@contextmanager
def requests(client: Any) -> Iterator[tuple[Counter[str], list[dict[str, Any]]]]:
    """The operations `client` calls, counted, and the parameters of its Queries."""
    counted: Counter[str] = Counter()
    queries: list[dict[str, Any]] = []
    lock = threading.Lock()  # the status index's partitions are queried from threads

    def count(model: Any, **_: Any) -> None:
        with lock:
            counted[model.name] += 1

    def record(params: dict[str, Any], **_: Any) -> None:
        with lock:
            queries.append(dict(params))

    events = client.meta.events
    events.register("before-call.dynamodb", count)
    events.register("before-parameter-build.dynamodb.Query", record)
    try:
        yield counted, queries
    finally:
        events.unregister("before-call.dynamodb", count)
        events.unregister("before-parameter-build.dynamodb.Query", record)


@pytest.fixture
def store(aws: AwsResources) -> DynamoDbRunStore:
    store = open_store(aws, prefix=f"{unique('test')}/")
    for n in range(RUNS):
        store.create_run(make_run(
            f"run_{n:04d}", manifest={"schema_version": "1.0", "id": f"agent-{n % AGENTS}",
                                      "steps": []},
            tenant="acme" if n % 5 else "other", created_at=NOW + timedelta(minutes=n)))
    return store


def test_a_search_by_agent_and_time_range_is_one_query_of_the_agent_index(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    window = {"created_after": NOW + timedelta(minutes=60),
              "created_before": NOW + timedelta(minutes=240)}
    expected = sorted((f"run_{n:04d}" for n in range(60, 240) if n % AGENTS == 2 and n % 5),
                      reverse=True)
    with requests(aws.dynamodb) as (counted, queries):
        page = store.list_runs(agent="agent-2", tenant="acme", newest_first=True, limit=50,
                               **window)
    assert [run.run_id for run in page.runs] == expected[:50] and page.cursor is None
    print(f"\nsearch by agent and time range over {RUNS} runs (DynamoDB): {dict(counted)}")
    assert "Scan" not in counted
    assert counted == {"Query": 1, "BatchGetItem": 1}, counted
    [query] = queries
    assert query["IndexName"] == AGENT_INDEX
    assert "#created_at" in query["FilterExpression"]
    # Another tenant's runs of the agent are in another partition: not read at all.
    assert store.list_runs(agent="agent-2", tenant="nobody", **window).runs == []


def test_search_pages_are_queries_and_an_id_prefix_narrows_the_key_range(
        aws: AwsResources, store: DynamoDbRunStore) -> None:
    seen: list[str] = []
    cursor = None
    with requests(aws.dynamodb) as (counted, queries):
        for _ in range(RUNS):
            page = store.list_runs(agent="agent-4", tenant="acme", run_id_prefix="run_01",
                                   newest_first=True, limit=4, cursor=cursor)
            seen += [run.run_id for run in page.runs]
            cursor = page.cursor
            if cursor is None:
                break
    assert seen == sorted((f"run_{n:04d}" for n in range(100, 200) if n % AGENTS == 4
                           and n % 5), reverse=True)
    assert "Scan" not in counted
    pages = -(-len(seen) // 4)
    assert counted["Query"] == pages, counted
    assert all(query["IndexName"] == AGENT_INDEX for query in queries)
    with requests(aws.dynamodb) as (counted, queries):
        page = store.list_runs(tenant="acme", run_id_prefix="run_02", limit=100)
    assert [run.run_id for run in page.runs] == [f"run_{n:04d}" for n in range(200, 300)
                                                 if n % 5]
    assert counted == {"Query": 1, "BatchGetItem": 2}, counted
    [query] = queries
    assert query["IndexName"] == TENANT_INDEX
    assert query["ExpressionAttributeValues"][":start"] == {"S": "run_02"}
