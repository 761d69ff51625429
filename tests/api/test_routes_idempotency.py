"""`Idempotency-Key`: a repeat returns the run its first request created, never a second run."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from routes_harness import ECHO, Api, Reply, manifest_text

from agent_runtime.run_ids import generate_run_id
from stores.sqlite import SqliteRunStore

BODY = {"manifest": manifest_text("hello.agent.yaml"), "options": ECHO}


def test_a_repeat_with_the_same_body_returns_the_same_run(api: Api) -> None:
    first = api.post("/runs", BODY, headers={"Idempotency-Key": "order-42"})
    assert first.status == 201
    again = api.post("/runs", dict(reversed(BODY.items())),  # the same JSON, keys reordered
                     headers={"Idempotency-Key": "order-42"})
    assert again.status == 200, again
    assert again.run == api.get(f"/runs/{first.run['runId']}").run
    assert api.launcher.started == [first.run["runId"]]  # started once
    assert len(api.get("/runs").body["runs"]) == 1


def test_a_repeat_with_another_body_is_a_conflict_naming_the_header(api: Api) -> None:
    first = api.post("/runs", BODY, headers={"Idempotency-Key": "order-42"})
    other = api.post("/runs", {**BODY, "variables": {"topic": "fencing"}},
                     headers={"Idempotency-Key": "order-42"})
    assert other.status == 409
    assert other.problem["field"] == "Idempotency-Key"
    assert api.get(f"/runs/{first.run['runId']}").run["status"] == "completed"


def test_the_key_belongs_to_the_tenant(api: Api) -> None:
    alice = api.post("/runs", BODY, headers={"Idempotency-Key": "k"})
    bob = api.post("/runs", BODY, headers={"Idempotency-Key": "k"}, token="bob-token")
    assert alice.status == bob.status == 201
    assert alice.run["runId"] != bob.run["runId"]


def test_keyed_runs_list_newest_first_among_the_others(api: Api) -> None:
    created = []
    for n in range(4):
        headers = {"Idempotency-Key": f"order-{n}"} if n % 2 else {}
        created.append(api.post("/runs", BODY, headers=headers).run["runId"])
    for run_id in created:  # a generated, time-ordered id, keyed or not
        assert re.fullmatch(r"run_[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}", run_id)
    listed = [run["runId"] for run in api.get("/runs").body["runs"]]
    assert listed == created[::-1]
    repeat = api.post("/runs", BODY, headers={"Idempotency-Key": "order-1"})
    assert (repeat.status, repeat.run["runId"]) == (200, created[1])


def test_an_invalid_first_request_leaves_the_key_unused(api: Api) -> None:
    bad = api.post("/runs", {**BODY, "variables": {"nope": 1}},
                   headers={"Idempotency-Key": "k"})
    assert bad.status == 422
    assert api.post("/runs", BODY, headers={"Idempotency-Key": "k"}).status == 201


def test_a_key_must_be_printable_ascii_and_bounded(api: Api) -> None:
    for key in ("x" * 256, "tab\there"):
        reply = api.post("/runs", BODY, headers={"Idempotency-Key": key})
        assert reply.status == 422 and reply.problem["field"] == "Idempotency-Key", key


def test_twenty_concurrent_requests_with_one_key_create_one_run(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    SqliteRunStore(path).close()
    stores = [SqliteRunStore(path) for _ in range(20)]
    apis = [Api(store) for store in stores]  # twenty servers over one database
    start = threading.Barrier(len(apis))
    replies: list[Reply] = []

    def post(api: Api) -> None:
        start.wait()
        replies.append(api.post("/runs", BODY, headers={"Idempotency-Key": "once"}))

    threads = [threading.Thread(target=post, args=(api,)) for api in apis]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert sorted(reply.status for reply in replies) == [200] * 19 + [201]
        assert len({reply.run["runId"] for reply in replies}) == 1
        assert sum(len(api.launcher.started) for api in apis) == 1
        assert len(stores[0].list_runs().runs) == 1
    finally:
        for store in stores:
            store.close()


def test_generated_ids_sort_by_creation() -> None:
    ids = [generate_run_id() for _ in range(2000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"run_[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}", i) for i in ids)
