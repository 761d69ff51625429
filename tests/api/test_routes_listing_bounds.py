"""Run views and pages of runs are bounded in bytes; a large output comes by reference.

Issue 31: a 50 MB output made `GET /runs` answer 50 MB. Now a run's view shows
its output only when its JSON text is at most `ApiLimits.max_inline_output_bytes`
(else `outputRef` and `outputBytes`, and `GET /runs/{runId}/output` returns
it), and a page of `GET /runs` ends before the run that would take it past
`ApiLimits.max_page_bytes`, never with no run while runs remain.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import parse_qsl

import pytest
from routes_harness import ECHO, Api, manifest_text

from agent_runtime.api import ApiLimits
from agent_runtime.engine import AgentRuntime
from agent_runtime.models.base import ModelRequest, ModelResponse, TextListener, Usage
from agent_runtime.testing import FakeClock
from stores.base import RunStore

MB = 1_000_000


class BulkModel:
    """A provider whose answer is as long as its model name says: `bulk/5000000`
    answers 5,000,000 characters (`bulk/3xé` three of `é`)."""

    async def generate(self, request: ModelRequest, *,
                       on_text: TextListener | None = None) -> ModelResponse:
        count, _, char = request.model.partition("x")
        return ModelResponse(text=(char or "y") * int(count),
                             usage=Usage(input_tokens=1, output_tokens=1), model=request.model)


def bulk_api(store: RunStore, limits: ApiLimits | None = None, kind: str = "local") -> Api:
    runtime = AgentRuntime(store=store, clock=FakeClock(), owner="api-test",
                           models={"bulk": BulkModel()})
    return Api(store, kind=kind, runtime=runtime, limits=limits)


def start_bulk(api: Api, size: int | str, token: str = "alice-token") -> dict[str, Any]:
    """A completed run whose output is a string of `size` characters."""
    reply = api.post("/runs", {"manifest": manifest_text("hello.agent.yaml"),
                               "options": {"model": f"bulk/{size}"}}, token=token)
    assert reply.status == 201, reply
    assert reply.run["status"] == "completed", reply.run
    return reply.run


def pages_of(api: Api, **query: Any) -> list[tuple[list[str], int]]:
    """Every page of GET /runs, following cursors: each one's run ids and size in bytes."""
    pages: list[tuple[list[str], int]] = []
    cursor = None
    while True:
        reply = api.get("/runs", query={**query, **({} if cursor is None else
                                                   {"cursor": cursor})})
        assert reply.status == 200, reply
        assert reply.body["runs"], "an empty page while runs remain"
        pages.append(([run["runId"] for run in reply.body["runs"]], len(reply.text.encode())))
        cursor = reply.body["cursor"]
        if cursor is None:
            return pages


def listed(api: Api, **query: Any) -> list[list[str]]:
    return [ids for ids, _ in pages_of(api, **query)]


@pytest.mark.parametrize("kind", ["local", "aws"])
def test_a_5_mb_output_is_listed_by_reference_and_its_route_returns_it(
        store: RunStore, kind: str) -> None:
    api = bulk_api(store, kind=kind)  # the default limits
    big = start_bulk(api, 5 * MB)
    small = api.start("hello.agent.yaml")
    assert big["output"] is None and big["outputRef"] == f"/runs/{big['runId']}/output"
    assert big["outputBytes"] == 5 * MB + 2  # its JSON text: a string in quotes

    page = api.get("/runs")
    assert len(page.text.encode()) < 16 * 1024  # not 5 MB
    by_id = {run["runId"]: run for run in page.body["runs"]}
    assert set(by_id) == {big["runId"], small["runId"]}
    assert by_id[big["runId"]]["output"] is None
    assert by_id[big["runId"]]["outputRef"] == big["outputRef"]
    assert by_id[big["runId"]]["outputBytes"] == 5 * MB + 2
    assert by_id[small["runId"]]["output"] == small["output"] is not None
    assert by_id[small["runId"]]["outputRef"] is by_id[small["runId"]]["outputBytes"] is None
    # A run alone is bounded the same way.
    assert api.get(f"/runs/{big['runId']}").run == by_id[big["runId"]]

    # Past one answer's bound (ApiLimits.max_output_answer_bytes): by reference, then parts.
    output = api.get(big["outputRef"])
    assert output.status == 200, output
    assert output.body == {"runId": big["runId"], "status": "completed", "output": None,
                           "outputBytes": 5 * MB + 2, "next": f"{big['outputRef']}?offset=0"}
    assert json.loads(output_text(api, output.body["next"])) == "y" * 5 * MB
    assert api.get(f"/runs/{small['runId']}/output").body == {
        "runId": small["runId"], "status": "completed", "output": small["output"]}


def output_text(api: Api, first: str) -> bytes:
    """The output's JSON text, read part by part from `first` (an output's `next`)."""
    text, following = b"", first
    while following is not None:
        path, _, query = following.partition("?")
        part = api.get(path, query=dict(parse_qsl(query)))
        assert part.status == 200, part
        assert part.body["offset"] == len(text)
        assert len(part.text.encode()) <= ApiLimits().max_output_answer_bytes
        text += base64.b64decode(part.body["data"])
        following = part.body["next"]
    return text


def test_an_output_at_the_threshold_is_shown_and_one_byte_more_is_referenced(
        store: RunStore) -> None:
    api = bulk_api(store, ApiLimits(max_inline_output_bytes=1000))
    inline = start_bulk(api, 998)  # 1,000 bytes of JSON
    assert inline["output"] == "y" * 998 and inline["outputRef"] is None
    referenced = start_bulk(api, 999)
    assert referenced["output"] is None and referenced["outputBytes"] == 1001
    # Counted in UTF-8 bytes, as sent: 499 `é` are 998 bytes and the quotes 2.
    assert start_bulk(api, "499xé")["output"] == "é" * 499
    accented = start_bulk(api, "500xé")
    assert accented["output"] is None and accented["outputBytes"] == 1002
    assert api.get(accented["outputRef"]).body["output"] == "é" * 500


def test_the_page_budget_splits_a_listing_and_the_cursor_continues_it(
        store: RunStore) -> None:
    budget = 25_000
    api = bulk_api(store, ApiLimits(max_page_bytes=budget))
    ids = [start_bulk(api, 10_000)["runId"] for _ in range(5)]  # each view about 10.5 KB
    pages = pages_of(api)
    assert [page for page, _ in pages] == [ids[4:2:-1], ids[2:0:-1], ids[:1]]
    assert all(size <= budget for _, size in pages), pages
    # Without the budget the same runs are one page of 52 KB.
    whole = bulk_api(store).get("/runs")
    assert [run["runId"] for run in whole.body["runs"]] == ids[::-1]
    assert len(whole.text.encode()) > 2 * budget
    # `limit` still bounds a page in runs; the byte budget only ever shortens it.
    assert listed(api, limit=1) == [[run_id] for run_id in reversed(ids)]


def test_a_run_past_the_page_budget_is_a_page_of_its_own(store: RunStore) -> None:
    api = bulk_api(store, ApiLimits(max_page_bytes=1000))
    ids = [start_bulk(api, 5000)["runId"] for _ in range(3)]  # inline, 5 KB each
    pages = listed(api)
    assert pages == [[run_id] for run_id in reversed(ids)]
    first = api.get("/runs").body["runs"][0]
    assert first["output"] == "y" * 5000  # shown in full: it is within the output limit


def test_filters_and_the_budget_cursor_work_together(store: RunStore) -> None:
    api = bulk_api(store, ApiLimits(max_page_bytes=12_000))
    done = [start_bulk(api, 10_000)["runId"] for _ in range(3)]
    waiting = api.start("approval.agent.yaml")["runId"]
    assert listed(api, status="completed") == [[run_id] for run_id in reversed(done)]
    assert listed(api, status="suspended") == [[waiting]]


def test_another_tenants_output_is_not_found(store: RunStore) -> None:
    api = bulk_api(store)
    run = start_bulk(api, 20_000)
    theirs = api.get(run["outputRef"], token="bob-token")
    missing = api.get("/runs/run_0000000000000000000000000000000/output", token="bob-token")
    assert theirs.status == missing.status == 404
    assert theirs.body == missing.body  # existence is not disclosed
    assert api.get(run["outputRef"], token=None).status == 401
    assert api.get(run["outputRef"]).status == 200


def test_the_output_route_of_a_run_still_waiting_says_so_with_no_output(api: Api) -> None:
    run = api.start("approval.agent.yaml")
    reply = api.get(f"/runs/{run['runId']}/output")
    assert reply.status == 200
    assert reply.body == {"runId": run["runId"], "status": "suspended", "output": None}
    assert api.post("/runs", {"manifest": manifest_text("hello.agent.yaml"),
                              "options": ECHO}).run["outputRef"] is None
