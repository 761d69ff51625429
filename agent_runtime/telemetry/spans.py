"""Run events made into OpenTelemetry spans and metrics (the GenAI conventions).

`TelemetrySink` is an event sink: the engine stays free of OpenTelemetry, and
a span says only what its events say, so the events' data policy (ids,
timings, counts, error codes; never prompt, output, variable or tool-argument
text) is the spans' too. The tree of one attempt:

    invoke_agent {agent} (one per attempt; linked to the run's earlier attempts)
      step {id}                      kind, path
        iteration {n}                a loop's iteration
          step {id} ...
        chat {model}                 gen_ai.* request/response/usage
        execute_tool {name}
        webhook {method}
      commit                         a checkpoint write (store, seq)
        invoke_agent {agent} (a sub-run's attempt, when it runs in this process)

Spans are opened and closed as the events arrive (the engine emits them
synchronously, so the sink's clock is the call's). An attempt killed mid-way
never closes its spans: what it finished is exported, the rest is lost with
the process, and its takeover's spans join the same trace (trace_ids.py).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from agent_runtime.events import Event
from agent_runtime.telemetry.trace_ids import (
    TRACE_PARENT,
    attempt_span_id,
    caller_of,
    next_ids,
    run_span_id,
    trace_id_for,
)

SCOPE = "agent_runtime"
# Attempts whose end never arrived (a process that lost its lease mid-call and
# was stopped) are forgotten past this many, oldest first.
MAX_OPEN_ATTEMPTS = 4096

RUN_ENDS = {"run.completed": "completed", "run.failed": "failed",
            "run.cancelled": "cancelled", "run.suspended": "suspended",
            "run.superseded": "superseded"}


@dataclass
class _Attempt:
    span: Span
    open: dict[tuple[str, ...], Span] = field(default_factory=dict)
    # A chat span's metric attributes, kept until its duration is recorded.
    chats: dict[str, dict[str, AttributeValue]] = field(default_factory=dict)


def _ancestors(path: str) -> list[str]:
    """`a/b/0/c` -> [`a/b/0/c`, `a/b/0`, `a/b`, `a`]: the step, then what encloses it."""
    parts = path.split("/")
    return ["/".join(parts[:end]) for end in range(len(parts), 0, -1)]


class TelemetrySink:
    """Turns each run's events into spans and metrics. Thread-safe: one sink serves
    every runtime of a process (serve's event loops, sub-runs, wave members)."""

    def __init__(self, tracer_provider: trace.TracerProvider,
                 meter_provider: MeterProvider | None = None, *,
                 chosen_ids: bool = False) -> None:
        self._tracer = tracer_provider.get_tracer(SCOPE)
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        # Whether the provider gives spans the ids asked for (setup.ChosenIds): then
        # a top-level attempt is a root span of its run's trace and links to earlier
        # attempts by their computed ids; otherwise it hangs under a remote parent
        # standing for the run, in the same trace.
        self._chosen_ids = chosen_ids
        self._lock = threading.RLock()
        self._attempts: OrderedDict[tuple[str, int], _Attempt] = OrderedDict()
        # A sub-run step's span, by its child's run id: the child's attempts' parent.
        self._sub_runs: dict[str, Span] = {}
        if meter_provider is not None:
            meter = meter_provider.get_meter(SCOPE)
            self._tokens = meter.create_histogram(
                "gen_ai.client.token.usage", unit="{token}",
                description="Tokens used by a model call, by type (input, output)")
            self._duration = meter.create_histogram(
                "gen_ai.client.operation.duration", unit="s",
                description="Duration of a model call")
            self._commits = meter.create_histogram(
                "agent_runtime.commit.duration", unit="s",
                description="Duration of a commit point's checkpoint write")
            self._runs_started = meter.create_counter(
                "agent_runtime.runs.started", unit="{attempt}",
                description="Attempts started (a first attempt, a resume or a takeover)")
            self._takeovers = meter.create_counter(
                "agent_runtime.lease.takeovers", unit="{attempt}",
                description="Attempts taken over from an owner found gone")
            self._runs_finished = meter.create_counter(
                "agent_runtime.runs.finished", unit="{attempt}",
                description="Attempts ended, by how (completed, failed, suspended, ...)")

    # -- the sink ------------------------------------------------------------

    def emit(self, event: Event) -> None:
        kind = event.type
        with self._lock:
            if kind == "run.heartbeat":
                return  # a lease renewal while a call is in flight: nothing to trace
            if kind in ("run.started", "run.resumed"):
                self._start_attempt(event)
                return
            attempt = self._attempts.get((event.run_id, event.attempt))
            if attempt is None:
                return  # not an execution's event (a reconciler's), or one begun elsewhere
            if kind in RUN_ENDS:
                self._end_attempt(event, attempt, RUN_ENDS[kind])
            elif kind.startswith(("step.", "loop.iteration.")):
                self._step_event(event, attempt)
            elif kind.startswith("model."):
                self._model_event(event, attempt)
            elif kind.startswith("webhook."):
                self._webhook_event(event, attempt)
            elif kind.startswith("sub-run."):
                self._sub_run_event(event, attempt)
            elif kind == "checkpoint.saved" and "duration_ms" in event.data:
                self._commit(event, attempt)
            else:  # checkpoint.saved, wave.*, loop.goal.met, budget.*: marks on a span
                self._parent(attempt, event.step_path).add_event(
                    kind, _attributes(event.data))

    def flush(self, timeout_millis: int = 5000) -> None:
        force_flush = getattr(self._tracer_provider, "force_flush", None)
        if force_flush is not None:
            force_flush(timeout_millis)
        force_flush = getattr(self._meter_provider, "force_flush", None)
        if force_flush is not None:
            force_flush(timeout_millis)

    # -- attempts ------------------------------------------------------------

    def _start_attempt(self, event: Event) -> None:
        run_id, number = event.run_id, event.attempt
        # A run created under a caller's traceparent continues the caller's trace.
        caller = caller_of(event.data.get(TRACE_PARENT))
        trace_id = trace_id_for(run_id) if caller is None else caller[0]
        links = [Link(SpanContext(trace_id, attempt_span_id(run_id, earlier), is_remote=True,
                                  trace_flags=TraceFlags(TraceFlags.SAMPLED)),
                      {"agent_runtime.run.attempt": earlier})
                 for earlier in range(max(1, number - 16), number)] if self._chosen_ids else []
        continues = bool(event.data.get("continues"))
        parent_span = self._sub_runs.get(run_id)
        if continues:
            # A later slice of an attempt (on AWS, each Lambda invocation runs one): a
            # child of the attempt's first span, whose id it knows without having seen it.
            links = []
            context = trace.set_span_in_context(trace.NonRecordingSpan(SpanContext(
                trace_id, attempt_span_id(run_id, number) if self._chosen_ids
                else run_span_id(run_id), is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED))))
        elif parent_span is not None:
            context = trace.set_span_in_context(parent_span)
        elif caller is not None:
            context = trace.set_span_in_context(trace.NonRecordingSpan(SpanContext(
                trace_id, caller[1], is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED))))
        elif self._chosen_ids:
            context = Context()  # a root: its trace id is chosen below
        else:
            context = trace.set_span_in_context(trace.NonRecordingSpan(SpanContext(
                trace_id, run_span_id(run_id), is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED))))
        # The manifest's id (`agent`) names the agent, as step ids name steps.
        agent = event.data.get("agent")
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": run_id,
            "agent_runtime.run.id": run_id, "agent_runtime.run.attempt": number,
            "agent_runtime.run.resumed": event.type == "run.resumed"}
        if isinstance(agent, str):
            attributes["gen_ai.agent.name"] = agent
        attributes.update(_attributes(event.data, prefix="agent_runtime.run."))
        token = next_ids.set((trace_id, None if continues
                              else attempt_span_id(run_id, number)))
        try:
            span = self._tracer.start_span(
                "invoke_agent" if not isinstance(agent, str) else f"invoke_agent {agent}",
                context=context,
                                           kind=SpanKind.INTERNAL, attributes=attributes,
                                           links=links)
        finally:
            next_ids.reset(token)
        self._attempts[(run_id, number)] = _Attempt(span)
        while len(self._attempts) > MAX_OPEN_ATTEMPTS:
            self._attempts.popitem(last=False)[1].span.end()
        if self._meter_provider is not None:
            self._runs_started.add(1, {"agent_runtime.run.start": event.type.removeprefix(
                "run.")})
            if event.data.get("takeover"):
                self._takeovers.add(1)

    def end_open_attempts(self) -> None:
        """End every attempt still open as `running`: a Lambda invocation's slice that
        stopped at its deadline says nothing more, and its container may freeze."""
        with self._lock:
            for (run_id, number), attempt in list(self._attempts.items()):
                self._close(attempt, "running")
                attempt.span.set_attribute("agent_runtime.run.status", "running")
                attempt.span.end()
                del self._attempts[(run_id, number)]

    def _close(self, attempt: _Attempt, outcome: str) -> None:
        """End the attempt's open steps, calls and iterations, innermost first."""
        for key, span in reversed(list(attempt.open.items())):
            if outcome == "failed":
                span.set_status(Status(StatusCode.ERROR))
            elif outcome != "completed":
                span.add_event(f"run.{outcome}")
            span.end()
            if key[0] == "sub-run":
                self._sub_runs.pop(key[1], None)
        attempt.open.clear()

    def _end_attempt(self, event: Event, attempt: _Attempt, outcome: str) -> None:
        error_type = event.data.get("error_type")
        self._close(attempt, outcome)
        span = attempt.span
        span.set_attribute("agent_runtime.run.status", outcome)
        span.add_event(event.type, _attributes(event.data))
        if outcome == "failed":
            span.set_attribute("error.type", str(error_type or "run_failed"))
            span.set_status(Status(StatusCode.ERROR, str(error_type or "run_failed")))
        elif outcome == "completed":
            span.set_status(Status(StatusCode.OK))
        span.end()
        self._attempts.pop((event.run_id, event.attempt), None)
        if self._meter_provider is not None:
            self._runs_finished.add(1, {"agent_runtime.run.status": outcome})

    # -- steps and iterations ------------------------------------------------

    def _parent(self, attempt: _Attempt, path: str | None) -> Span:
        """The innermost open step or iteration at or above `path`, else the attempt."""
        if path:
            for prefix in _ancestors(path):
                for kind in ("step", "iteration"):
                    span = attempt.open.get((kind, prefix))
                    if span is not None:
                        return span
        return attempt.span

    def _open(self, attempt: _Attempt, key: tuple[str, ...], name: str, parent: Span,
              attributes: dict[str, AttributeValue]) -> Span:
        span = self._tracer.start_span(name, context=trace.set_span_in_context(parent),
                                       attributes=attributes)
        stale = attempt.open.pop(key, None)
        if stale is not None:  # its end never came (a replayed or cut call)
            stale.end()
        attempt.open[key] = span
        return span

    def _step_event(self, event: Event, attempt: _Attempt) -> None:
        path = event.step_path or ""
        data = event.data
        if event.type == "step.started":
            parent = self._parent(attempt, path.rpartition("/")[0])
            attributes: dict[str, AttributeValue] = {
                "agent_runtime.step.id": event.step_id or "",
                "agent_runtime.step.path": path,
                "agent_runtime.step.kind": str(data.get("kind", "")),
                "agent_runtime.step.resumed": bool(data.get("resumed"))}
            iteration = _enclosing_iteration(path)
            if iteration is not None:
                attributes["agent_runtime.loop.iteration"] = iteration
            self._open(attempt, ("step", path), f"step {event.step_id}", parent, attributes)
        elif event.type == "loop.iteration.started":
            iteration = data.get("iteration")
            self._open(attempt, ("iteration", path), f"iteration {iteration}",
                       self._parent(attempt, path.rpartition("/")[0]),
                       {"agent_runtime.step.id": event.step_id or "",
                        "agent_runtime.step.path": path,
                        "agent_runtime.loop.iteration": _int(iteration)})
        elif event.type in ("step.completed", "loop.iteration.completed"):
            kind = "step" if event.type == "step.completed" else "iteration"
            span = attempt.open.pop((kind, path), None)
            if span is not None:
                if "tokens" in data:
                    span.set_attribute("agent_runtime.step.tokens", _int(data["tokens"]))
                span.end()
        else:  # step.skipped, loop.iteration.skipped
            self._parent(attempt, path.rpartition("/")[0]).add_event(
                event.type, {"agent_runtime.step.path": path, **_attributes(data)})

    # -- model calls and tools -----------------------------------------------

    def _model_event(self, event: Event, attempt: _Attempt) -> None:
        path = event.step_path or ""
        data = event.data
        chat_key = ("chat", path)
        if event.type == "model.started":
            provider, model = str(data.get("provider", "")), str(data.get("model", ""))
            metric: dict[str, AttributeValue] = {
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
                      "gen_ai.request.model": model}
            attempt.chats[path] = dict(metric)
            self._open(attempt, chat_key, f"chat {model}", self._parent(attempt, path), {
                **metric, "gen_ai.system": provider, "agent_runtime.step.path": path,
                "agent_runtime.model.request": _int(data.get("request"))})
            return
        chat = attempt.open.get(chat_key)
        if event.type == "model.usage":
            usage_metric = attempt.chats.get(path, {})
            for field_name, token_type in (("input_tokens", "input"),
                                           ("output_tokens", "output")):
                count = data.get(field_name)
                if count is None:
                    continue
                if chat is not None:
                    chat.set_attribute(f"gen_ai.usage.{field_name}", _int(count))
                if self._meter_provider is not None:
                    self._tokens.record(_int(count), {**usage_metric,
                                                      "gen_ai.token.type": token_type})
        elif event.type == "model.completed":
            ended_metric = attempt.chats.pop(path, {})
            if chat is not None:
                reason = data.get("finish_reason")
                if reason is not None:
                    chat.set_attribute("gen_ai.response.finish_reasons", [str(reason)])
                if data.get("response_model") is not None:
                    chat.set_attribute("gen_ai.response.model", str(data["response_model"]))
                chat.set_attribute("agent_runtime.model.tool_calls",
                                   _int(data.get("tool_calls")))
                chat.end()
                attempt.open.pop(chat_key, None)
            if self._meter_provider is not None and "duration_ms" in data:
                self._duration.record(_int(data["duration_ms"]) / 1000, ended_metric)
        elif event.type == "model.tool.started":
            name = _tool_name(data)
            self._open(attempt, ("tool", path, str(data.get("call"))), f"execute_tool {name}",
                       self._parent(attempt, path), {
                           "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                           "agent_runtime.step.path": path,
                           "agent_runtime.tool.call": _int(data.get("call"))})
        elif event.type == "model.tool.completed":
            span = attempt.open.pop(("tool", path, str(data.get("call"))), None)
            if span is None:  # replayed, resolved or refused: it never started here
                self._parent(attempt, path).add_event(event.type, _attributes(data))
                return
            error_type = data.get("error_type")
            if error_type is not None:
                span.set_attribute("error.type", str(error_type))
                span.set_status(Status(StatusCode.ERROR, str(error_type)))
            span.end()
        elif event.type == "model.tool.requested" and chat is not None:
            chat.add_event(event.type, _attributes(data))  # text deltas: left out

    def _webhook_event(self, event: Event, attempt: _Attempt) -> None:
        path = event.step_path or ""
        data = event.data
        key = ("webhook", path)
        if event.type == "webhook.started":
            method = str(data.get("method", ""))
            self._open(attempt, key, f"webhook {method}", self._parent(attempt, path), {
                "http.request.method": method, "server.address": str(data.get("host", "")),
                "agent_runtime.step.path": path})
            return
        span = attempt.open.get(key)
        if span is None:
            self._parent(attempt, path).add_event(event.type, _attributes(data))
            return
        if event.type == "webhook.retried":
            span.add_event(event.type, _attributes(data))
            return
        if data.get("status") is not None:
            span.set_attribute("http.response.status_code", _int(data["status"]))
        if event.type == "webhook.failed":
            error_type = str(data.get("error_type") or "webhook_failed")
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR, error_type))
        span.end()
        attempt.open.pop(key, None)

    def _commit(self, event: Event, attempt: _Attempt) -> None:
        """A commit point's checkpoint write, which the event reports once it is done."""
        duration = event.data["duration_ms"]
        seconds = duration / 1000 if isinstance(duration, int | float) else 0.0
        end = time.time_ns()
        store = str(event.data.get("store", ""))
        span = self._tracer.start_span(
            "commit", context=trace.set_span_in_context(attempt.span),
            start_time=end - round(seconds * 1e9), attributes={
                "agent_runtime.checkpoint.seq": _int(event.data.get("seq")),
                "agent_runtime.store": store})
        span.end(end_time=end)
        if self._meter_provider is not None:
            self._commits.record(seconds, {"agent_runtime.store": store})

    def _sub_run_event(self, event: Event, attempt: _Attempt) -> None:
        child = str(event.data.get("child_run_id", ""))
        step = self._parent(attempt, event.step_path)
        step.add_event(event.type, _attributes(event.data))
        if event.type in ("sub-run.started", "sub-run.resumed"):
            step.set_attribute("agent_runtime.sub_run.id", child)
            self._sub_runs[child] = step
            attempt.open.setdefault(("sub-run", child), trace.INVALID_SPAN)
        else:
            self._sub_runs.pop(child, None)
            attempt.open.pop(("sub-run", child), None)


def _enclosing_iteration(path: str) -> int | None:
    """The loop iteration a step runs in: the number in its path above it."""
    parts = path.split("/")
    return int(parts[-2]) if len(parts) >= 2 and parts[-2].isdigit() else None


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _tool_name(data: dict[str, object]) -> str:
    """A tool the step offered is named; any other name the model chose only by its
    fingerprint, as its events do."""
    name = data.get("tool")
    return str(name) if name is not None else f"sha256:{data.get('tool_sha256', '')}"


def _attributes(data: dict[str, object], *,
                prefix: str = "agent_runtime.") -> dict[str, AttributeValue]:
    """An event's data as span attributes: scalars and lists of strings only (the
    events hold ids, counts and codes; anything nested is left out)."""
    out: dict[str, AttributeValue] = {}
    for key, value in data.items():
        if isinstance(value, str | bool | int | float):
            out[prefix + key] = value
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            out[prefix + key] = [str(item) for item in value]
    return out


__all__ = ["TelemetrySink"]
