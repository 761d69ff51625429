"""No answer of the API function passes Lambda's 6 MB response limit, whatever a run's output.

A run may produce up to `policy.maxRunOutputBytes` (8 MiB). Here a completed
run's ~7 MiB output (kept in S3 by the DynamoDB store) is asked for through the
real `functions.api.app.handler`: the output route answers by reference and
then in parts, every Lambda response (measured as Lambda carries it: the
handler's answer as JSON) stays under the limit, and the parts together are
the output.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import parse_qsl

from aws_stack import Deployment, http_event

from stores.records import RunRecord

ROLE = "arn:aws:iam::123456789012:role/agent-runtime-client"  # events/api-*.json's caller
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024
MIB = 1024 * 1024


def completed_run(deployment: Deployment, run_id: str, output: Any) -> None:
    store, clock = deployment.services.store, deployment.clock
    store.create_run(RunRecord(run_id=run_id, manifest_hash="h", tenant=ROLE))
    attempt = store.resume_run(run_id, owner="elsewhere", now=clock.now(), lease_seconds=60)
    store.complete_run(run_id, expected_attempt=attempt.attempt, output=output, at=clock.now())


def get(deployment: Deployment, path: str) -> tuple[int, Any]:
    """GET `path` (a run's output, with its query) through the API function:
    the status and body, after checking what Lambda would carry back."""
    route, _, query = path.partition("?")
    run_id = route.split("/")[2]
    event = http_event("api-get-run.json", runId=run_id, query=dict(parse_qsl(query)))
    event["routeKey"] = event["requestContext"]["routeKey"] = "GET /runs/{runId}/output"
    event["rawPath"] = event["requestContext"]["http"]["path"] = route
    answer = deployment.stack.invoke("ApiFunction", event)
    assert len(json.dumps(answer)) < LAMBDA_RESPONSE_LIMIT
    return answer["statusCode"], json.loads(answer["body"])


def test_a_7_mib_output_is_answered_in_parts_each_under_lambdas_limit(
        deployment: Deployment) -> None:
    # Quotes, backslashes and non-ASCII: what JSON escaping inflates most.
    output = {"text": 'say "é" \\ ' * (7 * MIB // 14)}
    text = json.dumps(output, ensure_ascii=False, separators=(",", ":")).encode()
    assert len(text) > 7 * MIB
    completed_run(deployment, "run_big_output", output)

    status, first = get(deployment, "/runs/run_big_output/output")
    assert status == 200
    assert first == {"runId": "run_big_output", "status": "completed", "output": None,
                     "outputBytes": len(text), "next": "/runs/run_big_output/output?offset=0"}
    read, following, parts = b"", first["next"], 0
    while following is not None:
        status, part = get(deployment, following)
        assert status == 200, part
        assert part["offset"] == len(read)
        read += base64.b64decode(part["data"])
        following, parts = part["next"], parts + 1
    assert parts == 3  # 3 MiB (less an envelope) a part
    assert json.loads(read) == output

    # The run's view names the output by reference, as it does any large one.
    view = deployment.stack.call_api(http_event("api-get-run.json", runId="run_big_output"))
    assert view.status == 200
    assert view.body["run"]["outputRef"] == "/runs/run_big_output/output"


def test_an_output_whose_escaped_text_passes_the_bound_is_answered_by_reference(
        deployment: Deployment) -> None:
    # 3 MiB of JSON text, but over 4 MiB once escaped inside a Lambda response.
    output = '"' * (3 * MIB)
    completed_run(deployment, "run_quoted_output", output)
    status, first = get(deployment, "/runs/run_quoted_output/output")
    assert status == 200 and first["output"] is None and first["next"] is not None
    small = "just right"
    completed_run(deployment, "run_small_output", small)
    assert get(deployment, "/runs/run_small_output/output") == (200, {
        "runId": "run_small_output", "status": "completed", "output": small})


def test_a_part_past_the_end_is_refused_by_name(deployment: Deployment) -> None:
    completed_run(deployment, "run_short_output", "short")
    status, problem = get(deployment, "/runs/run_short_output/output?offset=99")
    assert status == 422
    assert problem["field"] == "offset"
    assert problem["detail"] == ("offset 99 is past the end of the output's JSON text "
                                 "(7 bytes)")
    status, part = get(deployment, "/runs/run_short_output/output?offset=1&length=3")
    assert status == 200
    assert base64.b64decode(part["data"]) == b"sho"
    assert part["next"] == "/runs/run_short_output/output?offset=4"
