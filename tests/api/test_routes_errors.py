"""Every error is application/problem+json with the right status, and `field` when there is one."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from routes_harness import ECHO, MANIFESTS, Api, RecordingLauncher, manifest_text

from agent_runtime.api import ApiLimits
from agent_runtime.cli import main as cli_main
from stores.base import CorruptRecord, RunStore
from stores.memory import MemoryRunStore
from stores.records import RunRecord
from stores.sqlite import SqliteRunStore

HELLO = {"manifest": manifest_text("hello.agent.yaml"), "options": ECHO}


# -- 400: not JSON -------------------------------------------------------------------


@pytest.mark.parametrize(("body", "says"), [
    ("{bad", "not JSON"),
    ('{"manifest": "a", "manifest": "b"}', "duplicate key"),
    ('{"manifest": NaN}', "NaN is not a JSON number"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper"),
    ('{"manifest": ' + "[" * 500 + "]" * 500 + "}", "nested deeper"),
])
def test_a_body_that_is_not_json_is_400(api: Api, body: str, says: str) -> None:
    reply = api.request("POST", "/runs", body=body)
    assert reply.status == 400, reply
    assert says in reply.problem["detail"]


def test_a_body_that_is_not_utf8_is_400(store: RunStore) -> None:
    api = Api(store, kind="aws")  # API Gateway hands binary bodies over base64-encoded
    reply = api.request("POST", "/runs", body=b'{"manifest": "\xff"}')
    assert reply.status == 400 and "not UTF-8" in reply.problem["detail"]


# -- 404, 405 ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", [
    "/nothing", "/runs/x/nothing", "/runs/.hidden", "/runs/a..b", "/runs/" + "r" * 201,
    "/runs/run_1/checkpoints/0", "/runs/run_1/checkpoints/abc", "/runs/run_1/checkpoints/-1",
    "/runs/run_1/checkpoints/" + "9" * 40,
])
def test_a_url_naming_nothing_is_404(api: Api, path: str) -> None:
    reply = api.get(path)
    assert reply.status == 404, reply
    assert reply.problem["type"].endswith(":not-found")


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("DELETE", "/runs/run_1", "GET"), ("PUT", "/runs", "GET, POST"),
    ("GET", "/runs/run_1/cancel", "POST"),
])
def test_a_known_path_with_another_method_is_405(api: Api, method: str, path: str,
                                                 allowed: str) -> None:
    reply = api.request(method, path)
    assert reply.status == 405 and reply.headers["allow"] == allowed
    assert reply.problem["title"] == "Method Not Allowed"


# -- 409 -------------------------------------------------------------------------------


def test_an_approval_answered_differently_is_409_and_the_same_answer_is_fine(
        store: RunStore) -> None:
    runtime = Api(store).runtime
    api = Api(store, runtime=runtime, launcher=RecordingLauncher(runtime))  # answers only
    run_id = runtime.run_sync(manifest=MANIFESTS / "approval.agent.yaml", options=ECHO,
                              tenant="alice").run_id
    run = api.get(f"/runs/{run_id}").run
    path = f"/runs/{run_id}/approvals/{run['suspension']['details']['approvalId']}"
    assert api.post(path, {"approved": True}).status == 200
    assert api.post(path, {"approved": True}).status == 200
    conflict = api.post(path, {"approved": False})
    assert conflict.status == 409, conflict
    assert api.get(f"/runs/{run_id}").run["suspension"]["decision"]["approved"] is True
    assert [reason for _, reason, _ in api.launcher.resumed] == ["approval-recorded"] * 2


def test_answering_an_approval_the_run_does_not_wait_for_is_409(api: Api) -> None:
    run = api.start("approval.agent.yaml")
    wrong = api.post(f"/runs/{run['runId']}/approvals/apr_other", {"approved": True})
    assert wrong.status == 409 and "not waiting for approval apr_other" in wrong.problem["detail"]
    done = api.start("hello.agent.yaml")
    late = api.post(f"/runs/{done['runId']}/approvals/apr_x", {"approved": True})
    assert late.status == 409 and "it is completed" in late.problem["detail"]


def test_settling_an_effect_the_run_does_not_wait_on_is_409(api: Api) -> None:
    run = api.start("approval.agent.yaml")
    approval_id = run["suspension"]["details"]["approvalId"]
    # An approval is not an effect, though the store keeps both as answers.
    reply = api.post(f"/runs/{run['runId']}/effects/{approval_id}", {"action": "skip"})
    assert reply.status == 409 and "not waiting on effect" in reply.problem["detail"]
    assert api.get(f"/runs/{run['runId']}").run["suspension"]["decision"] is None


# -- 413, 415 ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["local", "aws"])
def test_a_body_over_the_limit_is_413_before_it_is_parsed(store: RunStore, kind: str) -> None:
    api = Api(store, kind=kind, limits=ApiLimits(max_body_bytes=2000))
    reply = api.request("POST", "/runs", body="{" + " " * 5000)  # not even JSON
    assert reply.status == 413 and "2,000 bytes" in reply.problem["detail"]
    assert api.post("/runs", HELLO).status == 201


@pytest.mark.parametrize("content_type", [
    "text/plain", "multipart/form-data", "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_json_by_its_content_type_is_415(api: Api, content_type: str) -> None:
    for path in ("/runs", "/runs/run_1/resume", "/runs/run_1/fork"):
        reply = api.request("POST", path, body='{"seq": 1}', content_type=content_type)
        assert reply.status == 415, (path, reply)
        assert reply.problem["detail"] == "send the body as application/json"


# -- 422: the request's fields ---------------------------------------------------------


@pytest.mark.parametrize(("body", "field"), [
    ({**HELLO, "budget": {"maxTotalTokens": 0}}, "budget.maxTotalTokens"),
    ({**HELLO, "budget": {"maxTotalTokens": "5"}}, "budget.maxTotalTokens"),
    ({**HELLO, "options": {"config": "/etc/agent.yaml"}}, "options.config"),
    ({**HELLO, "options": {"tools": ["tools.py"]}}, "options.tools"),
    ({**HELLO, "options": {"model": "no-slash"}}, "options.model"),
    ({**HELLO, "extra": 1}, "extra"),
    ({"manifest": 5}, "manifest"),
    ({"options": ECHO}, "manifest"),
    ({**HELLO, "variables": []}, "variables"),
])
def test_a_wrong_field_is_422_naming_it_in_camel_case(api: Api, body: Any, field: str) -> None:
    reply = api.post("/runs", body)
    assert reply.status == 422, reply
    assert reply.problem["field"] == field
    assert reply.problem["detail"].startswith(field)


@pytest.mark.parametrize("body", [None, "[]", '"text"', "null", "[null, null]", "[{}]"])
def test_a_body_that_is_not_an_object_is_422(api: Api, body: str | None) -> None:
    reply = api.request("POST", "/runs", body=body)
    assert reply.status == 422, reply


@pytest.mark.parametrize("body", ["[null, null]", '[{"seq": 1}]', "5"])
def test_an_optional_body_must_still_be_an_object(api: Api, body: str) -> None:
    run = api.start("hello.agent.yaml")
    for action in ("resume", "fork"):
        reply = api.request("POST", f"/runs/{run['runId']}/{action}", body=body)
        assert reply.status == 422, (action, reply)
    assert api.request("POST", f"/runs/{run['runId']}/resume", body="").status == 200


@pytest.mark.parametrize(("path", "body", "field"), [
    ("approvals/apr_1", {"approved": "yes"}, "approved"),
    ("approvals/apr_1", {}, "approved"),
    ("resume", {"maxTotalTokens": -1}, "maxTotalTokens"),
    ("fork", {"seq": 0}, "seq"),
    ("effects/k", {"action": "redo"}, "action"),
])
def test_action_bodies_are_checked_before_the_run_is_looked_at(api: Api, path: str, body: Any,
                                                                field: str) -> None:
    reply = api.post(f"/runs/run_1/{path}", body)
    assert reply.status == 422 and reply.problem["field"] == field


@pytest.mark.parametrize(("query", "field"), [
    ({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"limit": "many"}, "limit"),
    ({"status": "sleeping"}, "status"), ({"cursor": "not a cursor!"}, "cursor"),
    ({"cursor": "a"}, "cursor"), ({"parent": "../x"}, "parent"),
])
def test_query_parameters_are_checked(api: Api, query: dict[str, Any], field: str) -> None:
    reply = api.get("/runs", query=query)
    assert reply.status == 422, reply
    assert reply.problem["field"] == field


# -- 422: what the engine refuses, worded as the CLI words it -----------------------------


BAD_MANIFESTS = [  # the first six are also valid YAML mappings
    "schemaVersion: '1.0'\nsteps: [{id: a, type: nope}]\n",
    "schemaVersion: '1.0'\n",
    "schemaVersion: 1.0\nsteps: []\n",
    "schemaVersion: '1.0'\nsteps: [{id: a, type: prompt, prompt: hi, outputVariable: a.b}]\n",
    "schemaVersion: '1.0'\nsteps: [{id: a, type: prompt}]\n",
    "schemaVersion: '1.0'\nsteps: [{id: a, type: prompt, prompt: hi, when: 'a ==='}]\n",
    "schemaVersion: '1.0'\nsteps:\n  - id: a\n    id: b\n",
    "steps: [\n",
    "just text",
    "",
]


@pytest.mark.parametrize("text", BAD_MANIFESTS)
def test_a_manifest_error_reads_exactly_as_agent_runtime_validate_prints_it(
        api: Api, text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    reply = api.post("/runs", {"manifest": text, "options": ECHO})
    assert reply.status == 422, reply
    # The CLI names a file as it was given: a file called `manifest` reads the same.
    (tmp_path / "manifest").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert cli_main(["validate", "manifest"]) == 2
    assert capsys.readouterr().err == f"error: {reply.problem['detail']}\n"
    if BAD_MANIFESTS.index(text) < 6:  # sent as an object, the same words
        parsed = yaml.safe_load(text)
        as_object = api.post("/runs", {"manifest": parsed, "options": ECHO})
        assert as_object.problem["detail"] == reply.problem["detail"]
        assert as_object.problem.get("field") == reply.problem.get("field")


def test_a_manifest_errors_field_is_the_manifests_field(api: Api) -> None:
    reply = api.post("/runs", {"manifest": BAD_MANIFESTS[0], "options": ECHO})
    assert reply.problem["field"] == "steps[0].type"
    assert reply.problem["detail"].startswith("manifest: steps[0].type: unknown step type 'nope'")


def test_a_variable_error_names_the_variable(api: Api) -> None:
    unknown = api.post("/runs", {**HELLO, "variables": {"topik": "x"}})
    assert unknown.status == 422
    assert unknown.problem["field"] == "variables.topik"
    assert unknown.problem["detail"].startswith("request: variables.topik: unknown variable")
    typed = api.post("/runs", {**HELLO, "variables": {"topic": 5}})
    assert typed.problem["field"] == "variables.topic"
    assert "declared as string" in typed.problem["detail"]


def test_a_problem_quotes_what_was_sent_only_so_far(api: Api) -> None:
    key = "k" * 50_000
    reply = api.post("/runs", {**HELLO, "variables": {key: 1}})
    assert reply.status == 422
    assert len(reply.problem["detail"]) <= 2000 and len(reply.problem["field"]) <= 200


def test_a_model_the_host_does_not_serve_is_422(api: Api) -> None:
    reply = api.post("/runs", {"manifest": manifest_text("hello.agent.yaml"),
                               "options": {"model": "nowhere/model"}})
    assert reply.status == 422 and reply.problem["field"] == "steps[0].model"


@pytest.mark.parametrize(("body", "field", "says"), [
    ({"manifest": "schemaVersion: '1.0'\nagent: {ref: ../../etc/agent.yaml}\n"}, "agent.ref",
     "run manifest"),
    ({"manifest": {"schemaVersion": "1.0", "steps": [
        {"id": "s", "type": "sub-run", "manifestRef": "/etc/passwd"}]}},
     "steps[0].manifestRef", "self-contained"),
    ({"manifest": {"schemaVersion": "1.0", "steps": [
        {"id": "s", "type": "sub-run", "manifest": {"schemaVersion": "1.0", "steps": [
            {"id": "t", "type": "sub-run", "manifestRef": "x.yaml"}]}}]}},
     "steps[0].manifest.steps[0].manifestRef", "self-contained"),
    ({**HELLO, "options": {"model": "scripted/../../etc/script.yaml"}}, "steps[0].model",
     "scripted"),
    ({"manifest": {"schemaVersion": "1.0", "model": {"provider": "scripted", "model": "s.yaml"},
                   "steps": [{"id": "a", "type": "prompt", "prompt": "hi"}]}},
     "model", "scripted"),
])
def test_nothing_a_client_sends_makes_the_server_read_a_file(api: Api, body: Any, field: str,
                                                              says: str) -> None:
    reply = api.post("/runs", body)
    assert reply.status == 422, reply
    assert reply.problem["field"] == field and says in reply.problem["detail"]
    assert api.get("/runs").body["runs"] == []


# -- 500: only a damaged store -------------------------------------------------------------


class DamagedStore(MemoryRunStore):
    def load_run(self, run_id: str) -> RunRecord | None:
        raise CorruptRecord(f"run {run_id}: checksum mismatch in /var/lib/secret/runs.sqlite")


def test_a_damaged_record_is_a_500_that_says_nothing_internal(
        caplog: pytest.LogCaptureFixture) -> None:
    api = Api(DamagedStore())
    with caplog.at_level(logging.ERROR, logger="agent_runtime.api"):
        reply = api.get("/runs/run_1")
    assert reply.status == 500
    assert "secret" not in reply.text and "checksum" not in reply.text
    assert reply.problem["type"].endswith(":internal-error")
    assert "checksum mismatch" in caplog.text



def test_an_unusable_store_is_a_503_that_says_nothing_internal(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SqliteRunStore(tmp_path / "runs.sqlite")
    api = Api(store)
    store.close()  # a closed store: StoreUnavailable on every call
    with caplog.at_level(logging.ERROR, logger="agent_runtime.api"):
        reply = api.get("/runs/run_1")
    assert reply.status == 503
    assert str(tmp_path) not in reply.text
    assert reply.problem["type"].endswith(":store-unavailable")
    assert "unavailable" in caplog.text

HOSTILE = [
    ("POST", "/runs", '{"manifest": {"schemaVersion": "1.0", "steps": ' + "[" * 140
     + "]" * 140 + "}}"),
    ("POST", "/runs", '{"manifest": "' + "a: &a [*a]" + '"}'),
    ("POST", "/runs", '{"manifest": "x: !!python/object:os.system ls"}'),
    ("POST", "/runs", '{"manifest": "\\u0000\\ud800"}'),
    ("POST", "/runs", '{"manifest": {"schemaVersion": "1.0", "steps": [{"id": 1}]}}'),
    ("POST", "/runs", '{"manifest": {"schemaVersion": "1.0", "steps": []}, "variables": '
     '{"k": ' + "[" * 150 + "]" * 150 + "}}"),
    ("POST", "/runs", '{"manifest": "' + "a" * 50_000 + '"}'),
    ("POST", "/runs", '{"manifest": {}, "budget": {"maxTotalTokens": 1e400}}'),
    ("POST", "/runs", '{"manifest": {}, "budget": {"maxTotalTokens": ' + "9" * 5000 + "}}"),
    ("POST", "/runs/run_1/approvals/apr_1", '{"approved": true, "response": '
     + "{" * 10 + "}" * 10 + "}"),
    ("POST", "/runs/run_1/effects/k", '{"action": "result"}'),
    # Lone surrogates, as the API Lambda gets them too: refused by the request guard.
    ("POST", "/runs/run_1/approvals/apr_1", '{"approved": true, "response": "\\ud800"}'),
    ("POST", "/runs/run_1/effects/k", '{"action": "result", "result": {"\\udfff": 1}}'),
    ("POST", "/runs", '{"manifest": {}, "variables": {"a": ["\\udbff"]}}'),
    ("GET", "/runs?limit=" + "9" * 5000, None),
    ("GET", "/runs?cursor=" + "_" * 400, None),
    ("GET", "/runs?parent=" + "p" * 300, None),
]


@pytest.mark.parametrize(("method", "path", "body"), HOSTILE)
def test_hostile_requests_get_a_4xx_problem(api: Api, method: str, path: str,
                                            body: str | None) -> None:
    target, _, query = path.partition("?")
    params = dict(part.split("=", 1) for part in query.split("&")) if query else None
    reply = api.request(method, target, body=body, query=params)
    assert 400 <= reply.status < 500, reply
    assert reply.problem
