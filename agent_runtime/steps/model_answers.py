"""What a model's answer means to a prompt step: whether it is whole, the step's output
in it, and how events name what it says (never with the model's own words)."""

from __future__ import annotations

import json
import re

from stores.records import JsonObject, JsonValue

from agent_runtime.errors import StepFailed
from agent_runtime.excerpts import excerpt, fingerprint
from agent_runtime.manifest import PromptStep
from agent_runtime.models.base import ModelResponse
from agent_runtime.schema_refusals import SchemaRefused


def truncated(finish_reason: str) -> bool:
    """A finish reason saying the answer was cut at its token limit (as the reference
    reads them: `length`, `max_tokens`, `max_output_tokens`)."""
    return finish_reason.strip().lower().replace("-", "_") in (
        "length", "max_tokens", "max_output_tokens")


def check_completion(step: PromptStep, response: ModelResponse, step_path: str) -> None:
    """The step's `completionPolicy`: a truncated answer fails unless `onTruncation:
    accept`; with `requireOutput`, a final answer without output fails."""
    policy = step.completion_policy
    if truncated(response.finish_reason) and (
            policy is None or policy.on_truncation != "accept"):
        raise StepFailed("output_truncated",
                         f"step {step_path}: the model's answer was truncated "
                         f"({response.finish_reason}); raise maxOutputTokens or set "
                         "completionPolicy.onTruncation: accept",
                         {"finish_reason": event_finish_reason(response.finish_reason)})


def tool_fields(index: int, name: str, *, offered: bool) -> JsonObject:
    """How events name a tool call: its position in the model's response, and its
    tool. A tool the step offered is named (`tool`): the manifest and the host
    declared that name, so it says nothing the model made up. Any other name the
    model chose, so it is only fingerprinted and measured; nor is the model's call
    id ever carried (docs/design.md section 8: events hold ids, timings, counts and
    error codes)."""
    fields: JsonObject = {"call": index, "tool_sha256": fingerprint(name),
                          "tool_length": len(name)}
    if offered:
        fields["tool"] = name
    return fields


# What `model.completed` says about why the model stopped; a provider's own
# word for anything else is not repeated in events.
FINISH_REASONS = frozenset({"stop", "length", "tool-calls", "content-filter"})


def event_finish_reason(reason: str) -> str:
    return reason if reason in FINISH_REASONS else "other"


def event_model(model: str | None) -> str | None:
    """The model a provider says answered (`gen_ai.response.model`): a model name, or
    nothing when the provider's answer does not look like one."""
    if model is None or len(model) > 128 or not MODEL_NAME.fullmatch(model):
        return None
    return model


MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*")


def parse_output(step: PromptStep, response: ModelResponse, step_path: str) -> JsonValue:
    if step.output_schema is None:
        return response.text or ""
    data: JsonValue = response.data
    if data is None:
        text = (response.text or "").strip()
        if text.startswith("```"):
            text = text.strip("`").removeprefix("json").strip()
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as error:  # too deep is not JSON we take
            raise StepFailed(
                "output_schema_invalid",
                f"step {step_path}: the model's answer is not JSON ({error}): "
                f"{excerpt(text)}") from error
    from agent_runtime.schemas import compile_schema  # noqa: PLC0415 - jsonschema, when used

    try:
        failure = compile_schema(step.output_schema).failure(data)
    except SchemaRefused as error:
        raise StepFailed("output_schema_invalid", f"step {step_path}: the output could not be "
                         f"checked against outputSchema: {error.reason}") from error
    if failure is not None:
        raise StepFailed("output_schema_invalid",
                         f"step {step_path}: output does not match outputSchema {failure}")
    return data
