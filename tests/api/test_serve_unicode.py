"""Lone surrogates sent to a real `serve`: a 400 naming the field, never a 5xx.

`"\\ud800"` is valid JSON syntax but not Unicode text: no store, log or
answer can encode it. An approval's `response` holding one once answered 500
with a serialization traceback in the log (the store could not write the
decision). The request guard now refuses any body holding one, in a value or
a key at any depth, naming its JSON path; bytes that would decode to one (in
a body, a header, the query or the path) are not UTF-8 and are refused too.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from serve_process import (
    Serve,
    approval_manifest,
    assert_problem,
    run_of,
    running_serve,
    start,
    wait_for_status,
)

pytestmark = pytest.mark.slow

JSON = {"Content-Type": "application/json"}
MANIFEST = ('"schemaVersion: \'1.0\'\\nid: hello\\nsteps:\\n'
            '  - {id: a, type: prompt, prompt: hi}\\n"')


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    with running_serve(tmp_path_factory.mktemp("serve-unicode")) as serve:
        yield serve


@pytest.fixture
def client(server: Serve) -> Iterator[httpx.Client]:
    with server.client() as http:
        yield http


def test_a_lone_surrogate_in_an_approval_response_is_400_and_the_run_still_waits(
        server: Serve, client: httpx.Client) -> None:
    run_id = start(client, approval_manifest())["runId"]
    approval_id = wait_for_status(client, run_id, "suspended")["suspension"]["details"][
        "approvalId"]
    path = f"/runs/{run_id}/approvals/{approval_id}"

    for body, field in [(b'{"approved": true, "response": "\\ud800"}', "response"),
                        (b'{"approved": true, "response": {"note": ["ok", "\\udfff!"]}}',
                         "response.note[1]"),
                        (b'{"approved": true, "response": {"\\udc00": 1}}', "response")]:
        problem = assert_problem(client.post(path, content=body, headers=JSON), 400)
        assert problem.get("field") == field, problem
        assert "lone surrogate" in problem["detail"]

    still = run_of(client, run_id)
    assert still["status"] == "suspended" and still["suspension"]["decision"] is None
    # The same approval, answered with text that is Unicode (an emoji, as JSON escapes it).
    answered = client.post(path, content=b'{"approved": true, "response": "\\ud83d\\ude00"}',
                           headers=JSON)
    assert answered.status_code == 200, answered.text
    wait_for_status(client, run_id, "completed")
    log = server.output()
    assert "Traceback" not in log and "surrogates not allowed" not in log
    assert " 500" not in log


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/runs", '{"manifest": ' + MANIFEST + ', "variables": {"topic": "\\ud800"}}',
     "variables.topic"),
    ("/runs", '{"manifest": "id: \\ud800"}', "manifest"),
    ("/runs", '{"manifest": {"schemaVersion": "1.0", "id": "x", "steps": [{"id": "a", '
              '"type": "prompt", "prompt": "\\udbff"}]}}', "manifest.steps[0].prompt"),
    ("/runs", '{"manifest": ' + MANIFEST + ', "options": {"model": "scripted/\\ud800"}}',
     "options.model"),
    ("/runs", '{"\\ud800": 1}', None),
    ("/runs/run_x/effects/k1", '{"action": "result", "result": {"text": "\\udead"}}',
     "result.text"),
    ("/runs/run_x/resume", '{"maxTotalTokens": 5, "\\udead": 1}', None),
    ("/runs/run_x/fork", '{"seq": "\\udead"}', "seq"),
])
def test_a_lone_surrogate_anywhere_in_a_body_is_400_naming_it(
        client: httpx.Client, path: str, body: str, field: str | None) -> None:
    problem = assert_problem(client.post(path, content=body.encode("ascii"), headers=JSON), 400)
    assert problem.get("field") == field, problem
    assert "lone surrogate" in problem["detail"]
    assert "(\\ud" in problem["detail"]  # the surrogate named by its escape, never raw


@pytest.mark.parametrize(("path", "headers"), [
    ("/runs?status=%ED%A0%80", {}),
    ("/runs?parent=%ED%A0%80&cursor=%ED%B3%BF", {}),
    ("/runs/%ED%A0%80", {}),
    ("/runs/run_x/approvals/%ED%A0%80", {}),
    ("/console/%ED%A0%80", {}),
    ("/runs", {"Idempotency-Key": b"\xed\xa0\x80"}),
    ("/runs", {"X-Anything": b"\xed\xa0\x80"}),
])
def test_bytes_of_a_surrogate_elsewhere_are_refused_with_a_4xx(
        server: Serve, client: httpx.Client, path: str, headers: dict[str, bytes]) -> None:
    method = "POST" if headers else "GET"
    content = ('{"manifest": ' + MANIFEST + "}").encode() if headers else None
    response = client.request(method, path, content=content, headers={**JSON, **headers})
    assert 400 <= response.status_code < 500, response.text
    assert_problem(response, response.status_code)
    assert "Traceback" not in server.output()
