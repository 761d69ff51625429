"""Each tenant's requests a minute on AWS, counted in the runs table across the API's containers.

Requests go through the real `functions.api.app.handler` (Lambda's API, as
API Gateway invokes it). Two resolvers built on the same services stand for two
Lambda containers: what one counted, the other sees. The autouse
`calls_are_granted` checks that the counter's writes are ones the API role holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from aws_stack import Deployment, HttpAnswer, http_event, iam_caller

from functions.api import app
from functions.api.tenant_requests import PARTITION_PREFIX, REQUESTS_PER_MINUTE

ALICE = "arn:aws:iam::123456789012:user/alice"
BOB = "arn:aws:iam::123456789012:user/bob"
LIMIT = 3


@pytest.fixture
def containers(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Two API containers built with a limit of `LIMIT` requests a tenant a minute."""
    monkeypatch.setenv(REQUESTS_PER_MINUTE, str(LIMIT))
    built = [app.build_resolver(deployment.services) for _ in range(2)]
    monkeypatch.setattr(app, "_built", [])
    yield built


def call(deployment: Deployment, container: Any, caller: dict[str, Any] | None) -> HttpAnswer:
    app._built[:] = [(deployment.services, container)]
    return deployment.stack.call_api(http_event("api-list-runs.json", caller=caller, query={}))


def test_a_tenant_past_its_requests_a_minute_is_429_on_every_container(
        deployment: Deployment, containers: list[Any]) -> None:
    first, second = containers
    answers = [call(deployment, containers[n % 2], iam_caller(ALICE)) for n in range(LIMIT)]
    assert [answer.status for answer in answers] == [200] * LIMIT
    for container in (first, second):
        refused = call(deployment, container, iam_caller(ALICE))
        assert refused.status == 429, refused.body
        assert refused.headers["Content-Type"] == "application/problem+json"
        now = deployment.clock.now().timestamp()
        assert refused.headers["Retry-After"] == str(max(1, math.ceil(60 - now % 60)))
        assert "TenantRequestsPerMinute" in refused.body["detail"]
    # Another tenant has a count of its own; a request without an identity counts for none.
    assert call(deployment, second, iam_caller(BOB)).status == 200
    assert call(deployment, first, None).status == 401
    # The next minute starts a new count.
    deployment.clock.advance(60)
    assert call(deployment, second, iam_caller(ALICE)).status == 200


def test_the_count_is_an_item_that_expires(deployment: Deployment,
                                           containers: list[Any]) -> None:
    assert call(deployment, containers[0], iam_caller(ALICE)).status == 200
    store = deployment.services.store
    items = store.client.scan(TableName=store.table_name)["Items"]
    counts = [item for item in items if item["pk"]["S"].startswith(PARTITION_PREFIX)]
    assert len(counts) == 1
    assert ALICE not in str(counts[0])  # the tenant is hashed into the key
    assert counts[0]["requests"] == {"N": "1"}
    minute_ends = (int(deployment.clock.now().timestamp()) // 60 + 1) * 60
    assert minute_ends < int(counts[0]["expires_at"]["N"]) <= minute_ends + 600


def test_no_limit_by_default_counts_nothing(deployment: Deployment,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUESTS_PER_MINUTE, "0")
    monkeypatch.setattr(app, "_built", [])
    for _ in range(LIMIT + 1):
        assert deployment.stack.call_api(http_event(
            "api-list-runs.json", caller=iam_caller(ALICE), query={})).status == 200
    store = deployment.services.store
    items = store.client.scan(TableName=store.table_name)["Items"]
    assert not [item for item in items if item["pk"]["S"].startswith(PARTITION_PREFIX)]
