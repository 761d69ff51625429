"""`prompt` steps: a model conversation, with tool calls, until a final answer.

Commit points: after every model response that asks for tools, and after
every tool result; the final response completes the step (the sequence's
checkpoint follows). The frame's continuation holds only indexes and the
pending calls with their idempotency keys — the conversation itself is the
run's append-only transcript, so a resumed step replays it to the model
exactly and never re-runs a saved tool call.

Every tool call gets one idempotency key, generated when the model asks for
it and saved before the call is dispatched; every later attempt reuses it.
Before dispatch the key is reserved in the store's effect ledger, so a call
whose result was never saved is detected on recovery: an idempotent tool is
called again with the same key, any other suspends the run (`effect-unknown`).
Where the store settles in checkpoints, the reservation rides in the
checkpoint that makes the call the next one to run (and its result in the
one after it), so a tool call costs no commit of its own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TypedDict, cast

from stores.records import EffectStatus, Frame, JsonObject, JsonValue

from agent_runtime.artifact_access import ArtifactReader
from agent_runtime.capabilities import input_too_large
from agent_runtime.deadlines import CallCut, CallTimedOut
from agent_runtime.errors import StepFailed, SuspendRun
from agent_runtime.events import random_id
from agent_runtime.excerpts import excerpt
from agent_runtime.manifest import PromptStep
from agent_runtime.models.base import ModelAdapter, ModelError, ModelRequest, ModelResponse
from agent_runtime.serde import NotJsonSerialisable, json_size, json_value
from agent_runtime.state import MODEL_RESPONSE
from agent_runtime.steps.model_answers import (
    check_completion,
    event_finish_reason,
    event_model,
    parse_output,
    tool_fields,
)
from agent_runtime.steps.prompt_media import resolve_media
from agent_runtime.templates import render
from agent_runtime.tools import ToolArgumentsError, ToolContext
from agent_runtime.waves import admit_model_request

if TYPE_CHECKING:
    from agent_runtime.capabilities import ResolvedModel
    from agent_runtime.events import TextSink
    from agent_runtime.execution import Execution
    from agent_runtime.step_context import StepTool

TEXT_EVENT_INTERVAL = 0.25  # seconds between `model.text.delta` events of one answer
# A conversation that keeps asking for tools without ever answering is a
# runaway; bound it even when no limit is configured.
MAX_MODEL_ROUNDS = 64
# A driver that honours providerTimeoutMs reports its own timeout first; the
# engine's bound, this much later, covers those that do not.
DRIVER_TIMEOUT_GRACE = 0.25
# The share of a whole Advance slice that must be left to start a tool that is
# not idempotent (docs/design.md section 10, Time): one cut mid-call suspends as effect-unknown.
NON_IDEMPOTENT_SHARE = 0.5


class PendingCall(TypedDict):
    """A tool call the model asked for, saved with its idempotency key before dispatch."""

    call_id: str
    name: str
    arguments: JsonObject
    key: str


class ToolCall(PendingCall):
    index: int  # the call's position in its response: how events tell calls apart


# What a prompt step keeps in its frame between commit points (JSON, as saved):
# where its messages start in the transcript, the model rounds so far, and the
# tool calls of the last response with the next one to run.
PromptContinuation = TypedDict("PromptContinuation", {
    "from": int, "rounds": int, "pending": list[PendingCall], "next": int}, total=False)


def _continuation(frame: Frame) -> PromptContinuation:
    # A typed view of the frame's own dict: the frame saves it at every checkpoint.
    return cast(PromptContinuation, frame.continuation)


def _item(ctx: Execution, frame: Frame, type_: str, role: str,
          content: list[JsonObject], **extra: JsonValue) -> JsonObject:
    item: JsonObject = {"id": random_id(), "type": type_, "role": role,
                        "step_id": frame.step_id, "step_path": frame.step_path,
                        "content": content, "created_at": ctx.stamp()}
    item.update({key: value for key, value in extra.items() if value is not None})
    return item


# Message-level fields of a `messages[]` entry that travel with it to the model.
MESSAGE_FIELDS = ("metadata", "providerOptions")


def _initial_messages(step: PromptStep, scope: JsonObject) -> list[JsonObject]:
    """`{role, content, metadata?, providerOptions?}` for each message the step starts with."""
    if step.messages is None:
        messages: list[JsonObject] = []
        if step.system_prompt:
            messages.append({"role": "system", "content": [
                {"type": "text", "text": render(step.system_prompt, scope)}]})
        messages.append({"role": "user", "content": [
            {"type": "text", "text": render(step.prompt or "", scope)}]})
        return messages
    rendered = []
    for message in step.messages:
        data = message.model_dump(mode="json", by_alias=True, exclude_none=True)
        data["content"] = [{**part, "text": render(part["text"], scope)}
                           if part.get("type") == "text" else part for part in data["content"]]
        rendered.append(data)
    return rendered


def _as_message(item: JsonObject) -> JsonObject:
    role = "assistant" if item["type"] == MODEL_RESPONSE else item["role"]
    message = {"role": role, "content": item["content"]}
    message.update({key: item[key] for key in MESSAGE_FIELDS if key in item})
    return message


def _reservation(pending: list[PendingCall], index: int, ctx: Execution,
                 tools: dict[str, StepTool]) -> list[str]:
    """The key of call `index` of `pending`, to reserve in the checkpoint that makes
    it the next call, when it may go out right after that commit: the store
    reserves in checkpoints, the tool is known and idempotent, and neither the
    budget, an interrupt nor the slice's end would stop it (each stops it after
    the commit instead, on the path that reserves with `begin_effect`). A call
    the checkpoint records as next for the first time has a key no earlier
    commit reserved.

    A crash between that commit and the call leaves the effect reserved with
    no result: an idempotent tool is then simply called again with the key.
    A tool that is not idempotent is reserved by a commit of its own just
    before it goes out, so that a crash right after any checkpoint never
    leaves its outcome for an operator to decide."""
    if index >= len(pending) or not ctx.settles_in_checkpoint:
        return []
    call = pending[index]
    tool = tools.get(call["name"])
    if tool is None or not tool.idempotent or ctx.state.budget.exhausted \
            or ctx.runtime.interrupt.is_set() or not ctx.slice.has_room():
        return []
    return [call["key"]]


class _DeltaCounter:
    """A streamed channel (the answer's text, or its reasoning) as it arrives.

    Thousands of deltas may come: the event log gets at most a few a second,
    each counting the characters since the last one (never the text itself),
    while a live view (`sink`) gets every delta as it arrives."""

    def __init__(self, ctx: Execution, request: ModelRequest, frame: Frame, event: str,
                 sink: TextSink | None) -> None:
        self._ctx, self._step_id, self._path = ctx, request.step_id, frame.step_path
        self._event, self._sink = event, sink
        self._chars = 0
        self._at = 0.0

    def __call__(self, delta: str) -> None:
        self._chars += len(delta)
        now = time.monotonic()
        if now - self._at >= TEXT_EVENT_INTERVAL:
            self.flush()
            self._at = now
        if self._sink is not None:
            self._sink(self._path, delta)

    def flush(self) -> None:
        """Count what arrived since the last event, if anything did."""
        if self._chars:
            self._ctx.events.emit(self._event, step_id=self._step_id, step_path=self._path,
                                  chars=self._chars)
            self._chars = 0


def _check_input_size(request: ModelRequest, model: ResolvedModel, step_path: str) -> None:
    """Fail the step, before a paid call, when the request is certainly larger than its
    model profile's `capabilities.maxInputTokens` (agent_runtime/capabilities.py)."""
    if model.max_input_tokens is None:
        return
    size = json_size(request.messages) + json_size(
        [[tool.name, tool.description, tool.parameters] for tool in request.tools])
    why = input_too_large(size, model.max_input_tokens)
    if why is not None:
        raise StepFailed("input_too_large", f"step {step_path}: {why}",
                         {"bytes": size, "max_input_tokens": model.max_input_tokens})


def _streams(model: ResolvedModel, ctx: Execution) -> bool:
    """Whether to ask the provider to stream: as the model profile's
    `capabilities.streaming` says, else when someone watches the text live."""
    if model.streaming is not None:
        return model.streaming
    return ctx.text_sink is not None


class PromptStepExecutor:
    async def execute(self, step: PromptStep, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        state = _continuation(frame)
        model = ctx.resolve_model(step.model)
        tools = await ctx.prepare_tools(step.tools or [])
        limits = ctx.manifest.limits
        if "from" not in state:
            state.update({"from": len(ctx.state.transcript), "rounds": 0})
            for message in _initial_messages(step, ctx.scope()):
                ctx.state.add_transcript(_item(
                    ctx, frame, "message", message["role"], message["content"],
                    **{key: message.get(key) for key in MESSAGE_FIELDS}))
        while True:
            if "pending" in state:
                await self._run_tools(step, frame, ctx, tools)
                del state["pending"], state["next"]
            if state["rounds"] >= MAX_MODEL_ROUNDS:
                raise StepFailed("tool_loop_limit",
                                 f"step {frame.step_path}: {MAX_MODEL_ROUNDS} model rounds "
                                 "without a final answer")
            ctx.check_interrupt(before="model request")
            # Only this step's items: a parallel wave's members share the transcript.
            messages = resolve_media(
                [_as_message(item) for item in ctx.state.transcript[state["from"]:]
                 if item.get("step_path", frame.step_path) == frame.step_path],
                None if ctx.artifacts is None
                else ArtifactReader(ctx.artifacts, ctx.store, ctx.run, ctx.state.artifacts),
                step_path=frame.step_path)
            if limits and limits.max_messages_per_prompt is not None \
                    and len(messages) > limits.max_messages_per_prompt:
                raise StepFailed("too_many_messages",
                                 f"step {frame.step_path}: {len(messages)} messages exceed "
                                 f"limits.maxMessagesPerPrompt ({limits.max_messages_per_prompt})")
            if limits and limits.max_input_bytes is not None \
                    and json_size(messages) > limits.max_input_bytes:
                raise StepFailed("input_too_large",
                                 f"step {frame.step_path}: the request exceeds "
                                 f"limits.maxInputBytes ({limits.max_input_bytes})")
            index = await admit_model_request(ctx, frame, messages, step.max_output_tokens)
            timeout_ms = limits.provider_timeout_ms if limits else None
            request = ModelRequest(
                provider=model.provider, model=model.model, options=dict(model.options),
                messages=messages, tools=[tool.spec for tool in tools.values()],
                output_schema=step.output_schema, max_output_tokens=step.max_output_tokens,
                timeout_seconds=None if timeout_ms is None else timeout_ms / 1000,
                stream=_streams(model, ctx),
                run_id=ctx.run_id, step_id=step.id, step_path=frame.step_path,
                request_index=index,
                step_request_index=ctx.state.step_requests[step.id] + 1)
            _check_input_size(request, model, frame.step_path)
            response = await self._call_model(model.adapter, request, frame, ctx,
                                              reasoning=model.reasoning is not False)
            state["rounds"] += 1
            check_completion(step, response, frame.step_path)
            if not response.tool_calls:
                output = parse_output(step, response, frame.step_path)
                policy = step.completion_policy
                if policy is not None and policy.require_output and (
                        output is None or (isinstance(output, str) and not output.strip())):
                    raise StepFailed("output_required",
                                     f"step {frame.step_path}: the model's answer has no "
                                     "output, and completionPolicy.requireOutput is set")
                if limits and limits.max_output_bytes is not None \
                        and json_size(output) > limits.max_output_bytes:
                    raise StepFailed("output_too_large",
                                     f"step {frame.step_path}: output exceeds "
                                     f"limits.maxOutputBytes ({limits.max_output_bytes})")
                return output
            allowed = ctx.manifest.max_tool_calls_per_iteration
            if len(response.tool_calls) > allowed:
                raise StepFailed("too_many_tool_calls",
                                 f"step {frame.step_path}: the model asked for "
                                 f"{len(response.tool_calls)} tool calls in one response; "
                                 f"limits.maxToolCallsPerIteration is {allowed}")
            await ctx.checkpoint(reserving=_reservation(state["pending"], 0, ctx, tools))

    async def _call_model(self, adapter: ModelAdapter, request: ModelRequest, frame: Frame,
                          ctx: Execution, *, reasoning: bool = True) -> ModelResponse:
        listening = ctx.events.listening  # events and their fields only when heard
        if listening:
            ctx.events.emit("model.started", step_id=request.step_id,
                            step_path=frame.step_path, provider=request.provider,
                            model=request.model, request=request.request_index)
        started = time.monotonic()

        text = _DeltaCounter(ctx, request, frame, "model.text.delta", ctx.text_sink)
        if reasoning:
            request.on_reasoning = _DeltaCounter(ctx, request, frame, "model.reasoning.delta",
                                                 ctx.reasoning_sink)

        try:
            # Bounded by the engine itself, whether or not the driver honours
            # `timeout_seconds`: providerTimeoutMs, and the slice's deadline.
            response: ModelResponse = await ctx.bounded(
                adapter.generate(request, on_text=text), "model call",
                step_path=frame.step_path,
                timeout=None if request.timeout_seconds is None
                else request.timeout_seconds + DRIVER_TIMEOUT_GRACE)
            text.flush()
            if isinstance(request.on_reasoning, _DeltaCounter):
                request.on_reasoning.flush()
        except ModelError as error:
            raise StepFailed("model_error", f"step {frame.step_path}: {request.provider}/"
                             f"{request.model}: {error}", {"code": error.code}) from error
        except CallTimedOut:
            raise StepFailed("model_error", f"step {frame.step_path}: {request.provider}/"
                             f"{request.model}: no answer within limits.providerTimeoutMs "
                             f"({round((request.timeout_seconds or 0) * 1000)} ms)",
                             {"code": "timeout"}) from None
        tokens = ctx.state.budget.consume(response.usage, step_path=frame.step_path)
        keys = [random_id() for _ in response.tool_calls]
        content: list[JsonObject] = []
        if response.text and not response.tool_calls:
            content.append({"type": "text", "text": response.text})
        if response.data is not None:
            content.append({"type": "json", "value": json_value(response.data)})
        for call, key in zip(response.tool_calls, keys, strict=True):
            content.append({"type": "tool-call", "call": {
                "id": call.call_id, "name": call.name, "input": json_value(call.arguments),
                "idempotencyKey": key}})
        usage: dict[str, JsonValue] | None = (None if response.usage is None
                                              else dict(response.usage.as_json()))
        ctx.state.add_transcript(_item(ctx, frame, MODEL_RESPONSE, "assistant", content,
                                       request=request.request_index,
                                       model=f"{request.provider}/{request.model}",
                                       usage=usage, finish_reason=response.finish_reason))
        if usage and listening:
            ctx.events.emit("model.usage", step_id=request.step_id, step_path=frame.step_path,
                            input_tokens=response.usage.input_tokens if response.usage else None,
                            output_tokens=response.usage.output_tokens if response.usage else None,
                            tokens=tokens)
        if listening:
            ctx.events.emit("model.completed", step_id=request.step_id,
                            step_path=frame.step_path,
                            duration_ms=round((time.monotonic() - started) * 1000),
                            tool_calls=len(response.tool_calls),
                            finish_reason=event_finish_reason(response.finish_reason),
                            response_model=event_model(response.model))
        if response.tool_calls:
            state = _continuation(frame)
            state["pending"] = [
                PendingCall(call_id=call.call_id, name=call.name, arguments=call.arguments,
                            key=key) for call, key in zip(response.tool_calls, keys, strict=True)]
            state["next"] = 0
            if listening:  # their fields cost a hash of each name
                offered = {spec.name for spec in request.tools}
                for index, call in enumerate(response.tool_calls):
                    ctx.events.emit("model.tool.requested", step_id=request.step_id,
                                    step_path=frame.step_path,
                                    **tool_fields(index, call.name,
                                                   offered=call.name in offered))
        return response

    async def _run_tools(self, step: PromptStep, frame: Frame, ctx: Execution,
                         tools: dict[str, StepTool]) -> None:
        state = _continuation(frame)
        pending = state["pending"]
        while state["next"] < len(pending):
            call = ToolCall(**pending[state["next"]], index=state["next"])
            if call["key"] in ctx.reserved:
                # Reserved by the checkpoint just saved, which checked all that
                # the other path checks here: the call goes out at once.
                ctx.reserved.discard(call["key"])
                result = await self._invoke(call, frame, ctx, tools[call["name"]])
            else:
                ctx.state.budget.check(before="tool call")
                ctx.check_interrupt(before="tool call")
                result = await self._dispatch(call, frame, ctx, tools)
            part = {"type": "tool-result", "result": {"callId": call["call_id"],
                                                      "name": call["name"],
                                                      "idempotencyKey": call["key"], **result}}
            ctx.state.add_transcript(_item(ctx, frame, "tool-result", "tool", [part]))
            state["next"] += 1
            await ctx.checkpoint(reserving=_reservation(pending, state["next"], ctx, tools))

    async def _dispatch(self, call: ToolCall, frame: Frame, ctx: Execution,
                        tools: dict[str, StepTool]) -> JsonObject:
        name, key = call["name"], call["key"]
        tool = tools.get(name)
        if tool is None:
            ctx.events.emit("model.tool.completed", step_id=frame.step_id,
                            step_path=frame.step_path, error_type="unknown_tool",
                            **tool_fields(call["index"], name, offered=False))
            return {"error": {"type": "unknown_tool",
                              "message": f"tool {excerpt(name)} is not available to this "
                                         "step"}}
        # Too late in the slice to start it: end the slice before the effect is
        # reserved, so the next one dispatches it with nothing to doubt. A tool
        # that is not idempotent needs half a slice: cut mid-call, its outcome
        # would be unknown.
        ctx.slice.require_room("tool call", step_path=frame.step_path,
                         share=0.0 if tool.idempotent else NON_IDEMPOTENT_SHARE)
        effect = await ctx.begin_effect(key)
        if effect.status is EffectStatus.COMPLETED:
            # Dispatched and recorded by an earlier attempt that died before its checkpoint.
            ctx.events.emit("model.tool.completed", step_id=frame.step_id,
                            step_path=frame.step_path, replayed=True,
                            **tool_fields(call["index"], name, offered=True))
            result: JsonObject = effect.result
            return result
        if effect.attempt != ctx.attempt:
            resolution = ctx.effect_resolution(key)
            if resolution is not None:
                return await self._settle(resolution, call, frame, ctx, tool)
            if not tool.idempotent:
                raise SuspendRun("effect-unknown", {"key": key, "tool": name,
                                                    "step_path": frame.step_path,
                                                    "reserved_by_attempt": effect.attempt})
        return await self._invoke(call, frame, ctx, tool)

    async def _invoke(self, call: ToolCall, frame: Frame, ctx: Execution,
                      tool: StepTool) -> JsonObject:
        name, key = call["name"], call["key"]
        if ctx.events.listening:
            ctx.events.emit("model.tool.started", step_id=frame.step_id,
                            step_path=frame.step_path,
                            **tool_fields(call["index"], name, offered=True))
        started = time.monotonic()
        context = ToolContext(run_id=ctx.run_id, step_path=frame.step_path, idempotency_key=key,
                              attempt=ctx.attempt, tool_name=name,
                              artifact_sink=ctx.artifact_sink(frame))
        error_type = None
        try:
            output = await ctx.bounded(tool.invoke(dict(call["arguments"]), context),
                                       "tool call", step_path=frame.step_path)
            result: JsonObject = {"output": json_value(output, what=f"tool {name} result")}
        except CallCut as cut:
            if tool.idempotent:
                raise  # the next slice calls it again with the same key
            # It was sent and may have acted: an operator decides, as after a crash.
            raise SuspendRun("effect-unknown", {
                "key": key, "tool": name, "step_path": frame.step_path,
                "reserved_by_attempt": ctx.attempt, "cut_by_slice_end": True}) from cut
        except ToolArgumentsError as error:
            error_type = "invalid_arguments"
            result = {"error": {"type": error_type, "message": str(error)}}
        except NotJsonSerialisable as error:
            error_type = "invalid_result"
            result = {"error": {"type": error_type, "message": str(error)}}
        except Exception as error:
            # The model sees the failure and may recover; the run goes on.
            error_type = "tool_error"
            result = {"error": {"type": error_type,
                                "message": f"{type(error).__name__}: {excerpt(str(error))}"}}
        await ctx.settle_effect(key, result)
        if ctx.events.listening:
            ctx.events.emit("model.tool.completed", step_id=frame.step_id,
                            step_path=frame.step_path,
                            duration_ms=round((time.monotonic() - started) * 1000),
                            error_type=error_type,
                            **tool_fields(call["index"], name, offered=True))
        return result

    async def _settle(self, resolution: JsonObject, call: ToolCall, frame: Frame,
                      ctx: Execution, tool: StepTool) -> JsonObject:
        """An operator's decision on an effect whose outcome was unknown."""
        if resolution["action"] == "retry":
            return await self._invoke(call, frame, ctx, tool)
        if resolution["action"] == "result":
            result = {"output": resolution.get("result")}
        else:
            result = {"error": {"type": "skipped",
                                "message": "an operator skipped this tool call"}}
        await ctx.settle_effect(call["key"], result)
        ctx.events.emit("model.tool.completed", step_id=frame.step_id, step_path=frame.step_path,
                        resolved=resolution["action"], **tool_fields(call["index"], call["name"],
                                                                  offered=True))
        return result
