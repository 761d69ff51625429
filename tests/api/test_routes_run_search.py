"""GET /runs answers an operator's search (issue 39): by agent, id prefix and creation
time, with the status and parent filters, within the caller's tenant, paged by cursor;
a time without its zone, or not a time at all, is refused naming the parameter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from routes_harness import Api

from stores.base import RunStore
from stores.records import ParentRef, RunRecord

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def seed(store: RunStore) -> None:
    """Runs of two agents for alice and one for bob, a minute apart."""
    rows = [("run_a01", "writer", "alice"), ("run_a02", "reviewer", "alice"),
            ("run_a03", "writer", "alice"), ("run_b01", "writer", "alice"),
            ("run_b02", "writer", "bob"), ("run_b03", "named-only", "alice"),
            ("run_b04", "writer", "alice")]
    for minute, (run_id, agent, tenant) in enumerate(rows):
        manifest: dict[str, Any] = {"schema_version": "1.0", "steps": []}
        manifest["name" if agent == "named-only" else "id"] = agent
        parent = (ParentRef(run_id="run_a01", step_path="loop/0/sub") if run_id == "run_b04"
                  else None)
        store.create_run(RunRecord(run_id=run_id, manifest_hash="sha256:x", manifest=manifest,
                                   tenant=tenant, parent=parent,
                                   created_at=T0 + timedelta(minutes=minute)))


def ids(api: Api, **query: Any) -> list[str]:
    """Every run id GET /runs answers for `query`, following cursors two at a time."""
    found: list[str] = []
    cursor = None
    for _ in range(20):
        reply = api.get("/runs", query={**query, "limit": 2,
                                        **({} if cursor is None else {"cursor": cursor})})
        assert reply.status == 200, reply
        found += [run["runId"] for run in reply.body["runs"]]
        cursor = reply.body["cursor"]
        if cursor is None:
            return found
    raise AssertionError("the cursor never ended")


@pytest.mark.parametrize("kind", ["local", "aws"])
def test_runs_are_found_by_agent_prefix_and_time_within_the_callers_tenant(
        store: RunStore, kind: str) -> None:
    seed(store)
    api = Api(store, kind=kind)
    assert ids(api, agent="writer") == ["run_b04", "run_b01", "run_a03", "run_a01"]
    assert ids(api, agent="named-only") == ["run_b03"]
    assert ids(api, agent="writer", createdAfter="2026-12-03T09:02:00Z",
               createdBefore="2026-12-03T09:06:00Z") == ["run_b01", "run_a03"]
    # Another zone names the same instant: 10:02+01:00 is 09:02Z.
    assert ids(api, agent="writer", createdAfter="2026-12-03T10:02:00+01:00") == [
        "run_b04", "run_b01", "run_a03"]
    assert ids(api, idPrefix="run_b") == ["run_b04", "run_b03", "run_b01"]
    assert ids(api, idPrefix="run_b", agent="writer", parent="run_a01") == ["run_b04"]
    assert ids(api, idPrefix="run_b", status="created", createdBefore="2026-12-03T09:05:00Z") \
        == ["run_b01"]
    assert ids(api, agent="nobody") == []
    # bob sees his own run of the agent, never alice's.
    reply = api.get("/runs", query={"agent": "writer"}, token="bob-token")
    assert [run["runId"] for run in reply.body["runs"]] == ["run_b02"]


@pytest.mark.parametrize(("parameter", "value"), [
    ("createdAfter", "2026-12-03T09:00:00"),  # no zone
    ("createdAfter", "2026-12-03"),
    ("createdBefore", "yesterday"),
    ("createdBefore", "2026-13-03T09:00:00Z"),
    ("createdBefore", "2026-12-03T25:00:00Z"),
])
def test_a_time_that_is_not_iso_8601_with_a_zone_is_refused_naming_the_parameter(
        api: Api, parameter: str, value: str) -> None:
    reply = api.get("/runs", query={parameter: value})
    assert reply.status == 422, reply
    assert reply.problem["field"] == parameter
    assert value not in reply.problem["detail"]


@pytest.mark.parametrize(("parameter", "value"), [
    ("idPrefix", "run/../x"), ("idPrefix", ""), ("agent", ""), ("agent", "a" * 201)])
def test_a_malformed_search_text_is_refused_naming_the_parameter(
        api: Api, parameter: str, value: str) -> None:
    reply = api.get("/runs", query={parameter: value})
    assert reply.status == 422, reply
    assert parameter in reply.problem.get("field", "") + reply.problem["detail"]
