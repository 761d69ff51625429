"""What travels over HTTP: request and response bodies, camelCase on the wire.

Requests are strict (JSON types as written: `"5"` is not a number) and
refuse unknown fields, like the manifest format; snake_case spellings are
accepted too (`populate_by_name`). Responses are built from the store's
records here and nowhere else, so every route shows a run the same way.

Keys the engine writes (suspension details, step results, errors) are
camelCased; values that are the user's data (outputs, variables, approval
responses, tool results) are passed through untouched.

A run's view is bounded: its `output` is shown only when its JSON text is
small (`ApiLimits.max_inline_output_bytes`); a larger one is left out and
named by reference (`outputRef`, `outputBytes`), and `GET /runs/{runId}/output`
returns it. So a page of runs is a page of small views, and `run_page` stops
a page once the next view would take it past its byte budget.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel
from pydantic_core import to_json as json_bytes
from stores.records import (
    Checkpoint,
    CheckpointInfo,
    EffectRecord,
    EffectStatus,
    RunRecord,
    RunStatus,
    Suspension,
)

from agent_runtime.effect_owners import EffectOwner, owner_of
from agent_runtime.run_options import FORKED_FROM
from agent_runtime.telemetry.trace_ids import TRACE_PARENT, run_trace_id

# A run id in a URL: what the runtime generates (`run_<hex>`, a sub-run's
# `<parent>.sub-<hex>`) and what a user may choose, minus anything that could
# name a path (`/`, a leading dot; `..` is refused where ids are looked up).
RUN_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$"
# Approval ids (`apr_<hex>`) and effect keys (hex).
KEY_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._:-]{0,199}$"
# An `Idempotency-Key`: printable ASCII, bounded.
IDEMPOTENCY_KEY_PATTERN = r"^[ -~]{1,255}$"
# A page cursor: opaque, base64url.
CURSOR_MAX_LENGTH = 400
CURSOR_PATTERN = rf"^[A-Za-z0-9_-]{{1,{CURSOR_MAX_LENGTH}}}$"
MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[^\s]+$"
# Token limits: positive, and small enough to be a JSON number every client reads exactly.
MAX_TOKENS = 2**53 - 1

TokenLimit = Annotated[int, Field(ge=1, le=MAX_TOKENS)]


class WireModel(BaseModel):
    # Each model builds its validator and serializer when first used: a Lambda
    # cold start answers one request, which uses two or three of these models,
    # and does not pay for the rest (~12 ms of the API function's import).
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              strict=True, defer_build=True)


# -- requests ------------------------------------------------------------------


class RunOptionsIn(WireModel):
    """Runtime options a client may set. Only the model: a runtime config or a
    tools file is a path on the server's disk, which a client never names."""

    model: Annotated[str, StringConstraints(max_length=200, pattern=MODEL_PATTERN)] | None = \
        Field(default=None, description="PROVIDER/MODEL for every step, e.g. scripted/echo")


class BudgetIn(WireModel):
    max_total_tokens: TokenLimit | None = None


class CreateRunRequest(WireModel):
    """`POST /runs`: an agent manifest (an object, or its YAML or JSON text) and its inputs."""

    manifest: dict[str, Any] | str = Field(
        description="An agent manifest (schema 1.0) as an object, or its YAML/JSON text. A run "
                    "manifest (one naming its agent by a file path) is refused.")
    variables: dict[str, Any] | None = Field(default=None,
                                             description="Variable overrides by key")
    options: RunOptionsIn | None = None
    budget: BudgetIn | None = None


class ApprovalRequest(WireModel):
    approved: bool
    response: Any = Field(default=None, description="Any JSON value, recorded with the answer")


class ResumeRequest(WireModel):
    max_total_tokens: TokenLimit | None = Field(
        default=None, description="Replaces the run's token limit for the resumed attempt")


class ForkRequest(WireModel):
    seq: Annotated[int, Field(ge=1, le=MAX_TOKENS)] | None = Field(
        default=None, description="The checkpoint to start from (default: the latest)")
    variables: dict[str, Any] | None = Field(
        default=None, description="Replace the checkpoint's variables in the new run (edit, "
                                  "then fork; default: the checkpoint's own)")
    max_total_tokens: TokenLimit | None = Field(
        default=None, description="The new run's token limit (default: the one in force at "
                                  "the checkpoint)")


class SettleEffectRequest(WireModel):
    action: Literal["retry", "result", "skip"] = Field(
        description="retry: call the tool again with the same key; result: record `result` as "
                    "the call's output; skip: tell the model the call was skipped")
    result: Any = Field(default=None, description="The call's output (action `result` only)")


# -- responses -----------------------------------------------------------------


class Agent(WireModel):
    id: str | None = None
    name: str | None = None


class Parent(WireModel):
    run_id: str
    step_path: str


class SuspensionView(WireModel):
    reason: str = Field(description="approval, sub-run, token-budget, effect-unknown or "
                                    "interrupted")
    details: dict[str, Any]
    decision: dict[str, Any] | None = None


class ErrorView(WireModel):
    type: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class Usage(WireModel):
    consumed_tokens: int
    max_total_tokens: int | None = None


class ForkedFrom(WireModel):
    run_id: str
    seq: int


class RunView(WireModel):
    run_id: str
    status: RunStatus
    attempt: int
    tenant: str | None = None
    manifest_hash: str
    agent: Agent | None = None
    parent: Parent | None = None
    suspension: SuspensionView | None = Field(
        default=None, description="What the run waits on; set only while it is suspended")
    last_suspension: SuspensionView | None = Field(
        default=None, description=(
            "Once it is no longer suspended: what it last waited on, with the answer "
            "(`decision`: who answered an approval, when, and how)"))
    output: Any = Field(default=None, description="The run's output, when its JSON text is "
                                                  "small; else null, and `outputRef` names it")
    output_ref: str | None = Field(
        default=None, description="Set when the output is too large to show here (`output` "
                                  "is then null): the path that returns it, "
                                  "`/runs/{runId}/output`")
    output_bytes: int | None = Field(
        default=None, description="With `outputRef`: the length of the output's JSON text, "
                                  "in bytes")
    error: ErrorView | None = None
    usage: Usage
    checkpoint_seq: int | None = None
    created_at: datetime
    updated_at: datetime
    forked_from: ForkedFrom | None = None
    # Optional on the wire so a client reads servers that predate it.
    trace_id: str | None = Field(default=None, description=(
        "The OpenTelemetry trace id (32 hex digits) of the run's spans, whether or not "
        "this host exports them: the caller's when the run was created under a "
        "`traceparent`, else computed from the run's id (docs/telemetry.md)"))


class RunEnvelope(WireModel):
    run: RunView


class RunList(WireModel):
    runs: list[RunView] = Field(description="At most `limit` runs, and fewer when their JSON "
                                            "would pass the server's page size in bytes "
                                            "(never none while runs remain)")
    cursor: str | None = Field(default=None, description="Pass as `cursor` for the next page; "
                                                          "null on the last page")


class CrashLoopResumes(WireModel):
    resumed: list[str] = Field(description="The runs of this page that were suspended as "
                                           "`crash-loop` and are now resumed")
    cursor: str | None = Field(default=None, description="Pass as `cursor` to go on through "
                                                          "the suspended runs; null when all "
                                                          "were read")


class RunOutput(WireModel):
    run_id: str
    status: RunStatus
    output: Any = Field(default=None, description="The run's output (null until the run "
                                                  "completes), or null when it is answered "
                                                  "in parts: then `outputBytes` and `next` "
                                                  "are set")
    output_bytes: int | None = Field(
        default=None, description="Set when the output is answered in parts: the length of "
                                  "its JSON text (UTF-8), in bytes")
    offset: int | None = Field(default=None, description="With `data`: where in the output's "
                                                         "JSON text the part starts, in bytes")
    data: str | None = Field(default=None, description="A part: bytes of the output's JSON "
                                                       "text from `offset`, base64-encoded")
    next: str | None = Field(default=None, description="The path of the output's next part "
                                                       "(`?offset=`); null after the last")


class CheckpointSummary(WireModel):
    seq: int
    attempt: int
    step_path: str | None = Field(default=None, description="The step this checkpoint was "
                                                            "saved in (completed or in progress)")
    step_kind: str | None = None
    created_at: datetime
    consumed_tokens: int
    size_bytes: int


class CheckpointList(WireModel):
    checkpoints: list[CheckpointSummary]
    cursor: str | None = None


class FrameView(WireModel):
    step_path: str
    step_id: str
    step_index: int
    loop_iteration: int | None = None
    child_index: int | None = None


class CheckpointBudgetView(WireModel):
    consumed_tokens: int
    max_total_tokens: int | None = None


class CheckpointState(WireModel):
    seq: int
    attempt: int
    created_at: datetime
    variables: dict[str, Any]
    step_results: list[dict[str, Any]]
    cursor: list[FrameView]
    budget: CheckpointBudgetView


class CheckpointEnvelope(WireModel):
    checkpoint: CheckpointState


class EffectView(WireModel):
    key: str
    status: EffectStatus
    attempt: int
    tool: str | None = Field(default=None, description=(
        "The tool whose call made it, or `webhook` for a webhook step's; null when "
        "not known"))
    step_path: str | None = Field(default=None, description="The step that made it")
    created_at: datetime
    completed_at: datetime | None = None
    result: Any = None


class EffectList(WireModel):
    effects: list[EffectView]


class Caller(WireModel):
    """Who the credentials of a request name (`GET /whoami`)."""

    tenant: str = Field(description="The caller's tenant: every run it sees and starts is "
                                    "this tenant's")


# -- records -> wire ---------------------------------------------------------------


def camel_keys(value: Any) -> Any:
    """Engine-written keys camelCased, recursively (`approval_id` -> `approvalId`)."""
    if isinstance(value, dict):
        return {to_camel(key) if isinstance(key, str) else key: camel_keys(item)
                for key, item in value.items()}
    if isinstance(value, list):
        return [camel_keys(item) for item in value]
    return value


def _top_level_camel(value: dict[str, Any]) -> dict[str, Any]:
    return {to_camel(key): item for key, item in value.items()}


def output_ref(run_id: str) -> str:
    return f"/runs/{run_id}/output"


def run_view(record: RunRecord, *, max_output_bytes: int) -> RunView:
    """The run as every route shows it; an output whose JSON text is longer than
    `max_output_bytes` is left out and named by reference."""
    manifest = record.manifest
    output, ref, size = record.output, None, None
    if output is not None:
        # The record holds the output already; its text costs one copy, once.
        encoded = len(json_bytes(output))
        if encoded > max_output_bytes:
            output, ref, size = None, output_ref(record.run_id), encoded
    agent_id, agent_name = manifest.get("id"), manifest.get("name")
    origin = record.options.get(FORKED_FROM)
    # What the run waits on, only while it waits; once it moved on, the last one is
    # kept apart (a record keeps it, with the answer, for the step that asked).
    waiting = record.status is RunStatus.SUSPENDED
    return RunView(
        run_id=record.run_id, status=record.status, attempt=record.attempt,
        tenant=record.tenant, manifest_hash=record.manifest_hash,
        agent=None if agent_id is None and agent_name is None
        else Agent(id=agent_id if isinstance(agent_id, str) else None,
                   name=agent_name if isinstance(agent_name, str) else None),
        parent=None if record.parent is None
        else Parent(run_id=record.parent.run_id, step_path=record.parent.step_path),
        suspension=suspension_view(record.suspension) if waiting else None,
        last_suspension=None if waiting else suspension_view(record.suspension),
        output=output, output_ref=ref, output_bytes=size,
        error=None if record.error is None else ErrorView(
            type=record.error.type, message=record.error.message,
            details=camel_keys(record.error.details)),
        usage=Usage(consumed_tokens=record.consumed_tokens,
                    max_total_tokens=record.budget.max_total_tokens),
        checkpoint_seq=record.checkpoint_seq, created_at=record.created_at,
        updated_at=record.updated_at,
        forked_from=ForkedFrom(run_id=str(origin["run_id"]), seq=int(origin["seq"]))
        if isinstance(origin, dict) and "run_id" in origin and "seq" in origin else None,
        trace_id=run_trace_id(record.run_id, record.options.get(TRACE_PARENT)))


def run_envelope(record: RunRecord, *, max_output_bytes: int) -> RunEnvelope:
    return RunEnvelope(run=run_view(record, max_output_bytes=max_output_bytes))


def run_page(records: list[RunRecord], *, max_output_bytes: int,
             max_page_bytes: int) -> list[RunView]:
    """The views of `records`, in order, up to the first whose JSON would take the
    page past `max_page_bytes`; always the first, so a page is never empty while
    runs remain (one view past the budget is a page of its own)."""
    views: list[RunView] = []
    used = len(to_json(RunList(runs=[], cursor="-" * CURSOR_MAX_LENGTH)))
    for record in records:
        view = run_view(record, max_output_bytes=max_output_bytes)
        size = len(to_json(view).encode()) + (1 if views else 0)  # and a comma
        if views and used + size > max_page_bytes:
            break
        views.append(view)
        used += size
    return views


def run_output(record: RunRecord) -> RunOutput:
    return RunOutput(run_id=record.run_id, status=record.status, output=record.output)


def step_kind(manifest: dict[str, Any], step_path: str | None) -> str | None:
    """The `type` of the step at `step_path` (`refine/2/evaluate`) in the stored manifest.

    A loop's child path carries the iteration after the loop's id, so walking
    the path skips one segment after every loop.
    """
    if not step_path:
        return None
    steps: Any = manifest.get("steps")
    kind: str | None = None
    segments = step_path.split("/")
    index = 0
    while index < len(segments):
        if not isinstance(steps, list):
            return kind
        found = next((step for step in steps
                      if isinstance(step, dict) and step.get("id") == segments[index]), None)
        if found is None:
            return kind
        kind = str(found.get("type"))
        steps = found.get("steps")
        index += 2 if kind == "loop" else 1
    return kind


def checkpoint_position(checkpoint: Checkpoint, previous_results: int) -> str | None:
    """The step a checkpoint was saved in: the one it records completing, else the
    innermost step whose progress (a model response, a tool result) it saved."""
    if len(checkpoint.step_results) > previous_results:
        path = checkpoint.step_results[-1].get("step_path")
        return path if isinstance(path, str) else None
    for frame in reversed(checkpoint.cursor):
        if frame.step_id and frame.continuation:
            return frame.step_path
    return None


def checkpoint_summary(info: CheckpointInfo, checkpoint: Checkpoint | None,
                       manifest: dict[str, Any], previous_results: int) -> CheckpointSummary:
    path = None if checkpoint is None else checkpoint_position(checkpoint, previous_results)
    return CheckpointSummary(
        seq=info.seq, attempt=info.attempt, step_path=path, step_kind=step_kind(manifest, path),
        created_at=info.created_at, size_bytes=info.size_bytes,
        consumed_tokens=0 if checkpoint is None else checkpoint.budget.consumed_tokens)


def checkpoint_state(checkpoint: Checkpoint) -> CheckpointEnvelope:
    return CheckpointEnvelope(checkpoint=CheckpointState(
        seq=checkpoint.seq, attempt=checkpoint.attempt, created_at=checkpoint.created_at,
        variables=checkpoint.variables,
        step_results=[_top_level_camel(entry) for entry in checkpoint.step_results],
        cursor=[FrameView(step_path=frame.step_path, step_id=frame.step_id,
                          step_index=frame.step_index, loop_iteration=frame.loop_iteration,
                          child_index=frame.child_index) for frame in checkpoint.cursor],
        budget=CheckpointBudgetView(consumed_tokens=checkpoint.budget.consumed_tokens,
                                    max_total_tokens=checkpoint.budget.max_total_tokens)))


def suspension_view(suspension: Suspension | None) -> SuspensionView | None:
    if suspension is None:
        return None
    return SuspensionView(
        # An approval's `details` is the step's metadata, the user's value: kept as written.
        reason=suspension.reason, details={
            **camel_keys({k: v for k, v in suspension.details.items() if k != "details"}),
            **{k: v for k, v in suspension.details.items() if k == "details"}},
        # The decision's `response` is the user's value: only its own keys change.
        decision=None if suspension.decision is None
        else _top_level_camel(suspension.decision))


def effect_list(effects: list[EffectRecord], record: RunRecord,
                owners: dict[str, EffectOwner]) -> EffectList:
    """The run's effects, each named by the tool call or webhook step that made it
    (`owners`, agent_runtime/effect_owners.py), else by the suspension waiting on it."""
    suspension = record.suspension
    waiting_on = waiting_tool = None
    if suspension is not None and suspension.reason == "effect-unknown":
        waiting_on, waiting_tool = suspension.details.get("key"), suspension.details.get("tool")

    def owner(key: str) -> EffectOwner:
        found = owner_of(key, owners, record.run_id)
        if found.tool is None and key == waiting_on and waiting_tool is not None:
            return EffectOwner(str(waiting_tool), found.step_path)
        return found

    return EffectList(effects=[EffectView(
        key=effect.key, status=effect.status, attempt=effect.attempt,
        tool=owner(effect.key).tool, step_path=owner(effect.key).step_path,
        created_at=effect.created_at, completed_at=effect.completed_at, result=effect.result)
        for effect in effects])


def to_json(model: BaseModel) -> str:
    """A response body: by alias, JSON mode (datetimes as ISO 8601 text)."""
    return model.model_dump_json(by_alias=True)
