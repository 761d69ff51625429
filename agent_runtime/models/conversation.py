"""The transcript's content parts as provider drivers read and answer them.

A request's messages are `{role, content: [part]}` with the transcript's parts:
`text`, `json`, `tool-call` (`call: {id, name, input, idempotencyKey}`) and
`tool-result` (`result: {callId, name, output | error}`). Drivers map them to
their provider's format with the helpers here, so every driver reads a
history the same way:

- `reasoning` parts are provider-specific traces and are not sent back;
  `image` and `file` parts are refused with a clear error (no driver sends
  media yet).
- An assistant message that has a text part sends its `json` parts no
  further: the prompt step records a structured answer as both, and the
  model should see it once.
- A tool result is sent as text: the output itself when it is a string, else
  its JSON; an error as `{"error": {...}}`, flagged as an error where the
  provider has a flag for it.

Structured output (`outputSchema`) has three forms, chosen per driver and
provider: the provider's native JSON-schema output, a forced "answer" tool
whose input is the answer (`OUTPUT_TOOL`), or an instruction plus parsing the
answer text (`schema_instruction`, `parse_json_answer`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agent_runtime.excerpts import excerpt
from agent_runtime.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    Usage,
)

OUTPUT_TOOL = "structured_output"
OUTPUT_TOOL_DESCRIPTION = ("Give your final answer by calling this tool; its input is the "
                           "answer and must match the input schema.")
# A tool's input must be an object; an answer of another type is wrapped in one.
WRAPPED_ANSWER = "answer"

_FINISH_REASONS = {
    "stop": "stop", "end_turn": "stop", "stop_sequence": "stop",
    "tool_calls": "tool-calls", "tool_use": "tool-calls", "function_call": "tool-calls",
    "length": "length", "max_tokens": "length", "model_context_window_exceeded": "length",
    "content_filter": "content-filter", "content_filtered": "content-filter",
    "guardrail_intervened": "content-filter", "refusal": "content-filter",
}


def parts(message: dict[str, Any], *, driver: str) -> Iterator[dict[str, Any]]:
    """The parts of `message` a driver sends, in order (see the module docstring)."""
    content = message.get("content") or []
    has_text = any(part.get("type") == "text" for part in content)
    for part in content:
        kind = part.get("type")
        if kind == "reasoning":
            continue
        if kind == "json" and has_text and message.get("role") == "assistant":
            continue
        if kind in ("text", "json", "tool-call", "tool-result"):
            yield part
            continue
        raise ModelError("unsupported_content",
                         f"the {driver} driver cannot send a {kind!r} message part "
                         "(supported: text, json, tool-call, tool-result)")


def part_text(part: dict[str, Any]) -> str:
    """The text of a `text` or `json` part."""
    if part.get("type") == "json":
        return json.dumps(part.get("value"), ensure_ascii=False)
    return str(part.get("text", ""))


def message_text(message: dict[str, Any], *, driver: str) -> str:
    """The text of a message of only text and json parts (a system or user message)."""
    return "\n".join(part_text(part) for part in parts(message, driver=driver)
                     if part["type"] in ("text", "json"))


def split_system(messages: list[dict[str, Any]], *,
                 driver: str) -> tuple[str, list[dict[str, Any]]]:
    """The system prompt (all system messages' text) and the other messages."""
    system = [message_text(m, driver=driver) for m in messages if m.get("role") == "system"]
    rest = [m for m in messages if m.get("role") != "system"]
    return "\n\n".join(text for text in system if text), rest


def tool_result_text(result: dict[str, Any]) -> str:
    if result.get("error") is not None:
        return json.dumps({"error": result["error"]}, ensure_ascii=False)
    output = result.get("output")
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def tool_result_failed(result: dict[str, Any]) -> bool:
    return result.get("error") is not None


Block = dict[str, Any]


def alternating_turns(messages: list[dict[str, Any]], *, driver: str,
                      call: Callable[[dict[str, Any]], Block],
                      result: Callable[[dict[str, Any]], Block],
                      text: Callable[[str], Block]) -> list[dict[str, Any]]:
    """The transcript as a provider that alternates user and assistant turns of
    content blocks wants it (Anthropic, Bedrock): each part becomes the block its
    `call`, `result` or `text` function builds (blank text is left out, as such
    providers refuse it), and a message's tool results go in the user turn
    after it, since they answer that turn."""
    mapped: list[dict[str, Any]] = []
    for message in messages:
        blocks: list[Block] = []
        results: list[Block] = []
        for part in parts(message, driver=driver):
            if part["type"] == "tool-call":
                blocks.append(call(part["call"]))
            elif part["type"] == "tool-result":
                results.append(result(part["result"]))
            elif written := part_text(part):
                blocks.append(text(written))
        role = "assistant" if message.get("role") == "assistant" else "user"
        mapped.append({"role": role, "content": blocks})
        mapped.append({"role": "user", "content": results})
    return _merge_consecutive(mapped)


def _merge_consecutive(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join adjacent messages of the same role: providers that alternate user and
    assistant turns want tool results and the next user text in one turn."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        if not message["content"]:
            continue
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1]["content"].extend(message["content"])
        else:
            merged.append({"role": message["role"], "content": list(message["content"])})
    return merged


def tool_arguments(raw: Any, *, tool: str) -> dict[str, Any]:
    """A tool call's arguments: a JSON object (or its text, as streamed)."""
    if raw is None or raw == "":
        return {}
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError as error:
            raise ModelError("invalid_tool_call", f"the model called tool {excerpt(tool)} with "
                             f"arguments that are not JSON ({error})") from error
    if not isinstance(value, dict):
        raise ModelError("invalid_tool_call", f"the model called tool {excerpt(tool)} with "
                         "arguments that are not a JSON object")
    return value


def finish_reason(raw: str | None, *, tool_calls: bool) -> str:
    if tool_calls:
        return "tool-calls"
    if raw is None:
        return "stop"
    return _FINISH_REASONS.get(raw, raw)


def schema_instruction(schema: dict[str, Any]) -> str:
    return ("Answer with only a JSON value, no prose and no code fence, that matches this "
            f"JSON Schema:\n{json.dumps(schema, ensure_ascii=False)}")


def parse_json_answer(text: str | None) -> Any:
    """The JSON value an answer's text holds (a code fence around it is allowed);
    None when it holds none, and the prompt step reports the text as invalid."""
    if not text:
        return None
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").strip()
        if body.startswith("json"):
            body = body[len("json"):]
    try:
        return json.loads(body)
    except ValueError:
        return None


def output_tool_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """An object schema for the answer — a forced answer tool's input, or a
    response format, must be an object — and whether the answer is wrapped
    (`{"answer": ...}`) because the output schema is not one."""
    if schema.get("type") == "object" or ("type" not in schema and "properties" in schema):
        return schema, False
    return {"type": "object", "properties": {WRAPPED_ANSWER: schema},
            "required": [WRAPPED_ANSWER]}, True


@dataclass(frozen=True)
class AnswerTool:
    """The forced answer tool of a request with an `outputSchema`, for a driver
    that offers no native structured output: the tool, its object input schema,
    whether the answer is wrapped in it, and whether it is the only tool (then
    the call names it; with other tools, the model must call one of them)."""

    input_schema: dict[str, Any]
    wrapped: bool
    alone: bool
    name: str = OUTPUT_TOOL
    description: str = OUTPUT_TOOL_DESCRIPTION


def answer_tool(schema: dict[str, Any], tool_names: list[str], *, driver: str) -> AnswerTool:
    """The answer tool for `schema`, next to the request's tools (`tool_names`);
    a user tool of the same name is refused rather than shadowed."""
    if OUTPUT_TOOL in tool_names:
        raise ModelError("tool_name_reserved", f"a tool named {OUTPUT_TOOL!r} clashes with "
                         f"the {driver} driver's structured-output tool")
    input_schema, wrapped = output_tool_schema(schema)
    return AnswerTool(input_schema, wrapped, alone=not tool_names)


def answer_tool_response(request: ModelRequest, *, text: str | None,
                         calls: list[ToolCallRequest], stop: str | None, usage: Usage | None,
                         model: str | None, wrapped: bool) -> ModelResponse:
    """The response of a driver that may have forced an answer tool: the answer
    tool's call becomes `data` (and its JSON the text), else a structured answer
    is read from the text; a stop for tool use with no real call left is a stop."""
    data = None
    if request.output_schema is not None:
        calls, data = split_output_call(calls, wrapped=wrapped)
        if data is not None:
            text = json.dumps(data, ensure_ascii=False)
        elif not calls:
            data = parse_json_answer(text)
    ended_for_tools = finish_reason(stop, tool_calls=False) == "tool-calls"
    raw_finish = None if ended_for_tools and not calls else stop
    return ModelResponse(text=text, data=data, tool_calls=calls, usage=usage,
                         finish_reason=finish_reason(raw_finish, tool_calls=bool(calls)),
                         model=model)


def split_output_call(calls: list[ToolCallRequest], *,
                      wrapped: bool) -> tuple[list[ToolCallRequest], Any]:
    """Separate the forced answer tool's call from real tool calls.

    With real calls the conversation goes on and the answer call is dropped
    (it never reaches the transcript, so no result is owed for it)."""
    real = [call for call in calls if call.name != OUTPUT_TOOL]
    answers = [call for call in calls if call.name == OUTPUT_TOOL]
    if real or not answers:
        return real, None
    arguments = answers[0].arguments
    return [], arguments.get(WRAPPED_ANSWER) if wrapped else arguments
