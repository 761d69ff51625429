"""`GET /runs/{runId}/output`: a run's output, whole when it fits one answer, else in parts.

A run may produce up to `policy.maxRunOutputBytes` (8 MiB by default) of
output, and an answer has a ceiling below that: on AWS a Lambda response is
at most 6 MB, and API Gateway carries the body JSON-escaped inside it, where
a quote or backslash takes two bytes and a non-ASCII character six or twelve.
So the whole output is answered only when its body, measured as that escaped
text (`carried_bytes`), is within `ApiLimits.max_output_answer_bytes`.

A larger output is answered by reference: `output` null, `outputBytes` (the
length of its JSON text) and `next`, the path of its first part,
`?offset=0`. A part (`?offset=&length=`) carries bytes of the output's JSON
text from `offset`, base64-encoded (no escaping can inflate it), at most
`part_bytes` of them, and `next` names the part after it (null after the
last). Concatenated and decoded, the parts are the output's JSON text. The
output of a finished run never changes, so parts read at different times fit
together.
"""

from __future__ import annotations

import base64
import json

from pydantic_core import to_json as json_bytes
from stores.records import RunRecord

from agent_runtime.api.problems import ApiProblem
from agent_runtime.api.wire import RunOutput, output_ref

__all__ = ["carried_bytes", "output_answer", "part_bytes"]

# What a part's envelope adds to its data: ids, status, numbers and `next`
# (`ApiLimits` keeps the answer limit well above it).
PART_ENVELOPE_BYTES = 1024


def carried_bytes(body: str) -> int:
    """The bytes `body` takes inside a Lambda response: JSON-escaped, non-ASCII as `\\uXXXX`."""
    return len(json.dumps(body))


def part_bytes(max_answer_bytes: int) -> int:
    """The most output bytes one part carries: base64 of them (4 bytes per 3) plus
    the envelope fits in `max_answer_bytes`."""
    return (max_answer_bytes - PART_ENVELOPE_BYTES) // 4 * 3


def output_answer(record: RunRecord, *, max_answer_bytes: int, offset: int | None,
                  length: int | None) -> str:
    """The body answering `GET /runs/{runId}/output` (with `?offset=&length=`, one part)."""
    if offset is None and length is None:
        whole = _body(RunOutput(run_id=record.run_id, status=record.status,
                                output=record.output))
        if carried_bytes(whole) <= max_answer_bytes:
            return whole
        return _body(RunOutput(run_id=record.run_id, status=record.status, output=None,
                               output_bytes=len(json_bytes(record.output)),
                               next=f"{output_ref(record.run_id)}?offset=0"))
    text = json_bytes(record.output)
    start = offset or 0
    if start > len(text):
        raise ApiProblem(422, f"offset {start} is past the end of the output's JSON text "
                              f"({len(text)} bytes)", field="offset")
    most = part_bytes(max_answer_bytes)
    end = min(len(text), start + min(most, length or most))
    return _body(RunOutput(
        run_id=record.run_id, status=record.status, output=None, output_bytes=len(text),
        offset=start,
        data=base64.b64encode(text[start:end]).decode("ascii"),
        next=f"{output_ref(record.run_id)}?offset={end}" if end < len(text) else None))


def _body(answer: RunOutput) -> str:
    # Only the fields this kind of answer has: a whole output is `{runId, status, output}`.
    return answer.model_dump_json(by_alias=True, exclude_unset=True)
