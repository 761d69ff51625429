"""The trace a run belongs to, derived from run ids: nothing stored, nothing to carry.

A run's trace id is a hash of its *trace root*, the id of the top-level run it
descends from. A sub-run's id is `<parent>.sub-<hash>` (steps/subrun.py), so
the root is the id before the first `.sub-`; every attempt, resume, takeover
and sub-run of that root therefore computes the same trace id in any process,
with no field in the run record and no store change. (A child whose parent's
id was too long for that form carries only a readable prefix of it: it still
has one trace of its own, stable across its attempts, though not its root's
when it runs in another process; in-process its parent's step is its parent
span whatever its id.)

An attempt's span id is a hash of the run id and the attempt number, so a
later attempt can link to all earlier ones without having seen them.
"""

from __future__ import annotations

import hashlib
import re
from contextvars import ContextVar

SUB_RUN_MARK = ".sub-"

# The run option holding the W3C `traceparent` a run was created under (`POST /runs`):
# kept with the run, so its attempts, takeovers and sub-runs (which inherit their
# parent's options) continue the caller's trace instead of one of their own.
TRACE_PARENT = "trace_parent"
# version 00: `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`; a later version
# may append fields after these, which are not kept.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")

# The ids the next span should have, for `ChosenIds` (setup.py) to hand out:
# set around the one `start_span` call that makes an attempt's span.
next_ids: ContextVar[tuple[int | None, int | None]] = ContextVar(
    "agent_runtime_next_span_ids", default=(None, None))


def parse_traceparent(header: str | None) -> str | None:
    """The `00-...` traceparent of a header, or None when it is absent or invalid (the
    W3C rule: an invalid one is ignored, not refused). Only these 55 characters are
    ever kept, whatever else the header held."""
    if header is None or len(header) < 55:
        return None
    match = _TRACEPARENT.match(header)
    if match is None:
        return None
    version, trace_id, parent_id, flags = match.groups()
    if version == "ff" or (version == "00" and len(header) != 55) \
            or (version != "00" and len(header) > 55 and header[55] != "-") \
            or trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    return f"00-{trace_id}-{parent_id}-{flags}"


def caller_of(traceparent: object) -> tuple[int, int] | None:
    """`(trace id, span id)` of a kept traceparent (`parse_traceparent`'s form)."""
    if not isinstance(traceparent, str) or parse_traceparent(traceparent) != traceparent:
        return None
    return int(traceparent[3:35], 16), int(traceparent[36:52], 16)


def trace_root(run_id: str) -> str:
    root, _, _ = run_id.partition(SUB_RUN_MARK)
    return root or run_id


def _hashed(text: str, bits: int) -> int:
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    value = int.from_bytes(digest[:bits // 8])
    return value or 1  # an all-zero id is invalid in OpenTelemetry


def trace_id_for(run_id: str) -> int:
    """The 128-bit trace id of `run_id`'s trace (its root's)."""
    return _hashed(f"agent-runtime trace\0{trace_root(run_id)}", 128)


def run_trace_id(run_id: str, trace_parent: object = None) -> str:
    """The trace id of a run's spans, as 32 hex digits: its caller's when it was
    created under a traceparent (its `trace_parent` option), else its root's."""
    caller = caller_of(trace_parent)
    return f"{trace_id_for(run_id) if caller is None else caller[0]:032x}"


def attempt_span_id(run_id: str, attempt: int) -> int:
    """The 64-bit span id of `run_id`'s attempt `attempt`."""
    return _hashed(f"agent-runtime attempt\0{run_id}\0{attempt}", 64)


def run_span_id(run_id: str) -> int:
    """The span id standing for the run as a whole: the remote parent of its
    attempts when the tracer provider chooses its own ids (not `ChosenIds`)."""
    return _hashed(f"agent-runtime run\0{run_id}", 64)
