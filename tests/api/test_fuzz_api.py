"""The HTTP API fuzzed from its own OpenAPI document (schemathesis) against a real `serve`.

Two passes of `schemathesis run` (its CLI, in a child process, with a HAR
report of every request it sent):

1. every operation, with generated ids: the validation layers, 404s for
   runs that do not exist, bodies of every shape, valid and not;
2. every operation on runs that exist: the path's `runId` (and `seq`,
   `approvalId`) pinned to a completed approval run, so the responses
   checked against the schema are real runs, checkpoints and effects.

About half of the generated JSON bodies carry a lone surrogate (`"\\ud800"`)
in one string or key (`surrogate_hooks.py`): schemathesis itself generates
only encodable text, and such a string once reached the store as a 500.

The test fails on any 5xx, any response that the document does not
declare (status code, content type, body schema, headers), a request the
schema forbids that is not refused, a request without the token that is
not 401, when fewer than `MIN_REQUESTS` requests were sent in all, and when
fewer than `MIN_SURROGATE_REQUESTS` of them carried a lone surrogate.
A client's input must never produce a 5xx. Reproduce a failure with the
`curl` line schemathesis prints, against `agent-runtime serve --token T`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from serve_process import FIXTURES, REPO, Serve, running_serve, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

pytest.importorskip("schemathesis")

TOKEN = "fuzz-test-token-0123456789abcdef"
MIN_REQUESTS = 1_000
MIN_SURROGATE_REQUESTS = 100
HOOKS = Path(__file__).with_name("surrogate_hooks.py")
# What the document promises, plus: a request without the token (or with a
# wrong one) is refused, data the schema forbids is refused with a 4xx, and a
# method a path does not take is 405. Not `positive_data_acceptance`: the
# schema admits any manifest object, the engine then checks it (422).
CHECKS = ",".join(("not_a_server_error", "status_code_conformance", "content_type_conformance",
                   "response_schema_conformance", "response_headers_conformance",
                   "ignored_auth", "negative_data_rejection", "unsupported_method"))
# Test cases per operation and pass (the coverage phase adds its own): about
# 1,500 requests in all, in well under a minute on two cores.
EXAMPLES = {"generated-ids": 60, "existing-runs": 25}


def seed_completed_run(serve: Serve) -> dict[str, Any]:
    """An approval run, answered and completed: checkpoints to read, an approval id."""
    with serve.client() as http:
        manifest = (FIXTURES / "approval.agent.yaml").read_text(encoding="utf-8")
        created = http.post("/runs", json={"manifest": manifest,
                                           "options": {"model": "scripted/echo"}})
        assert created.status_code == 201, created.text
        run_id = created.json()["run"]["runId"]

        def status(wanted: str) -> dict[str, Any] | None:
            run: dict[str, Any] = http.get(f"/runs/{run_id}").json()["run"]
            return run if run["status"] == wanted else None

        suspended = wait_until(lambda: status("suspended"), what="the seed run to suspend")
        approval_id = suspended["suspension"]["details"]["approvalId"]
        answered = http.post(f"/runs/{run_id}/approvals/{approval_id}", json={"approved": True})
        assert answered.status_code == 200, answered.text
        wait_until(lambda: status("completed"), what="the seed run to complete")
        return {"runId": run_id, "approvalId": approval_id, "seq": 1}


def fuzz(serve: Serve, workdir: Path, name: str,
         parameters: dict[str, Any] | None = None) -> tuple[int, list[dict[str, Any]], str]:
    """One `schemathesis run`; its exit code, the HAR entries and its output."""
    config = workdir / f"{name}.schemathesis.toml"
    lines = [f'{key} = {json.dumps(value)}' for key, value in (parameters or {}).items()]
    config.write_text("[parameters]\n" + "\n".join(lines) + "\n" if lines else "",
                      encoding="utf-8")
    har = workdir / f"{name}.har.json"
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run",
               f"{serve.base_url}/openapi.json",
               "--header", f"Authorization: Bearer {TOKEN}",
               "--checks", CHECKS,
               "--phases", "examples,coverage,fuzzing",
               "--max-examples", str(EXAMPLES[name]),
               "--workers", "1",  # 2 trips a CPython 3.11 ast thread-safety bug in hypothesis
               "--seed", "20261201",
               "--generation-database", "none",
               "--request-timeout", "30",
               "--report", "har", "--report-har-path", str(har),
               "--no-color"]
    env = dict(os.environ, SCHEMATHESIS_HOOKS=str(HOOKS), PYTHONPATH=str(REPO))
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=480,
                          check=False, env=env)
    output = done.stdout + done.stderr
    entries: list[dict[str, Any]] = (json.loads(har.read_text(encoding="utf-8"))["log"]
                                     ["entries"] if har.is_file() else [])
    return done.returncode, entries, output


def has_lone_surrogate(entry: dict[str, Any]) -> bool:
    """Whether the request's JSON body holds a lone surrogate (a pair, as JSON escapes an
    emoji, decodes to one character and does not count)."""
    text = (entry["request"].get("postData") or {}).get("text") or ""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    stack = [value]
    while stack:
        item = stack.pop()
        strings = [item] if isinstance(item, str) else list(item) if isinstance(item, dict) else []
        if any(0xD800 <= ord(char) <= 0xDFFF for each in strings for char in each):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def test_the_api_survives_its_own_openapi_document_fuzzed(
        tmp_path: Path, record_property: Any) -> None:
    with running_serve(tmp_path, token=TOKEN, args=["--no-access-log", "--workers", "4"]) \
            as serve:
        seed = seed_completed_run(serve)
        results = {"generated-ids": fuzz(serve, tmp_path, "generated-ids"),
                   "existing-runs": fuzz(serve, tmp_path, "existing-runs", seed)}
        with serve.client() as http:  # still answering after all that
            assert http.get(f"/runs/{seed['runId']}").status_code == 200
        server_log = serve.output()

    total = surrogates = 0
    for name, (code, entries, output) in results.items():
        server_errors = [f"{entry['request']['method']} {entry['request']['url']} -> "
                         f"{entry['response']['status']}" for entry in entries
                         if entry["response"]["status"] >= 500]
        assert not server_errors, f"{name}: 5xx answers:\n" + "\n".join(server_errors[:20])
        assert code == 0, f"{name}: schemathesis found failures:\n{output[-20000:]}"
        assert entries, f"{name}: no requests recorded:\n{output[-5000:]}"
        total += len(entries)
        surrogates += sum(1 for entry in entries if has_lone_surrogate(entry))
        record_property(f"requests_{name}", len(entries))
    record_property("requests_total", total)
    record_property("requests_with_lone_surrogates", surrogates)
    print(f"schemathesis sent {total} requests ({surrogates} with a lone surrogate): "
          + ", ".join(f"{name} {len(r[1])}" for name, r in results.items()))
    assert total >= MIN_REQUESTS
    assert surrogates >= MIN_SURROGATE_REQUESTS
    assert "Traceback" not in server_log, server_log[-20000:]
