"""OpenTelemetry spans of a run (issue 37, acceptance 1 and 4).

A run with a tool call, a loop, a sub-run whose child waits for an approval,
and a resume after the approval, seen through the SDK's in-memory exporter:
one trace, the span tree the GenAI conventions describe, token counts equal
to the runs' usage, and no canary planted in the prompt, the model's output,
a variable or a tool's arguments anywhere in a span.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_runtime import AgentRuntime, RunStatus, ToolContext, tool
from agent_runtime.events import ListEventSink
from agent_runtime.manifest import parse_agent_manifest
from agent_runtime.steps.subrun import child_run_id_for
from agent_runtime.telemetry.setup import ChosenIds
from agent_runtime.telemetry.spans import TelemetrySink
from agent_runtime.telemetry.trace_ids import attempt_span_id, trace_id_for
from agent_runtime.testing import FakeClock, scripted
from stores.memory import MemoryRunStore


def canary(tag: str) -> str:
    return tag + hashlib.sha256(tag.encode()).hexdigest()[:24]


PROMPT = canary("canaryprompt_")
OUTPUT = canary("canaryoutput_")
VARIABLE = canary("canaryvariable_")
ARGUMENT = canary("canaryargument_")
CANARIES = (PROMPT, OUTPUT, VARIABLE, ARGUMENT)


@tool(name="lookup", description="Looks a topic up.")
def lookup(query: str, ctx: ToolContext) -> str:
    return f"found {len(query)} characters"


def usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"inputTokens": input_tokens, "outputTokens": output_tokens,
            "totalTokens": input_tokens + output_tokens}


def said(text: str, input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {"text": text, "usage": usage(input_tokens, output_tokens)}


SCRIPT = {
    "ask": [{"toolCalls": [{"name": "lookup", "arguments": {"query": ARGUMENT}}],
             "usage": usage(11, 3)},
            said(f"looked up {OUTPUT}", 17, 5)],
    "say": [said(f"first {OUTPUT}", 7, 2), said(f"second {OUTPUT}", 8, 2)],
    "after": [said(f"child {OUTPUT}", 13, 4)],
    "finish": [said(f"done {OUTPUT}", 19, 6)],
}

AGENT = {
    "schemaVersion": "1.0", "id": "traced",
    "variables": [{"key": "topic", "type": "string", "value": VARIABLE},
                  {"key": "items", "type": "array", "value": ["a", "b"]}],
    "steps": [
        {"id": "ask", "type": "prompt", "prompt": f"{PROMPT} Look up {{{{ topic }}}}.",
         "tools": ["lookup"]},
        {"id": "each", "type": "loop",
         "loop": {"source": "items", "itemVariable": "item", "indexVariable": "i"},
         "steps": [{"id": "say", "type": "prompt", "prompt": f"{PROMPT} {{{{ item }}}}"}]},
        {"id": "delegate", "type": "sub-run", "manifest": {
            "schemaVersion": "1.0", "id": "child", "steps": [
                {"id": "confirm", "type": "approval", "prompt": f"{PROMPT} go?"},
                {"id": "after", "type": "prompt", "prompt": f"{PROMPT} after"}]}},
        {"id": "finish", "type": "prompt", "prompt": f"{PROMPT} finish",
         "includeInFinalOutput": True},
    ],
}


@dataclass
class Traced:
    spans: list[ReadableSpan]
    metrics: dict[str, Any]
    run_id: str
    child_id: str
    usage: dict[str, int]
    child_usage: tuple[int, int]

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [span for span in self.spans if span.name.startswith(prefix)]

    def by_id(self) -> dict[int, ReadableSpan]:
        return {span.context.span_id: span for span in self.spans}

    def parent_of(self, span: ReadableSpan) -> ReadableSpan | None:
        return None if span.parent is None else self.by_id().get(span.parent.span_id)

    def attempt_of(self, span: ReadableSpan) -> ReadableSpan:
        current: ReadableSpan | None = span
        while current is not None and not current.name.startswith("invoke_agent"):
            current = self.parent_of(current)
        assert current is not None, f"{span.name} is under no attempt span"
        return current


@pytest.fixture(scope="module")
def traced() -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(id_generator=ChosenIds())
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    sink = TelemetrySink(tracer_provider, meter_provider, chosen_ids=True)
    store = MemoryRunStore()
    runtime = AgentRuntime(store=store, models={"scripted": scripted(by_step=SCRIPT)},
                           tools=[lookup], event_sinks=[ListEventSink(), sink],
                           clock=FakeClock())
    agent = parse_agent_manifest(AGENT, source="test")
    first = runtime.run_sync(manifest=agent, options={"model": "scripted/test"})
    assert first.status is RunStatus.SUSPENDED
    child_id = child_run_id_for(first.run_id, "delegate")
    runtime.approve(child_id)
    done = runtime.run_sync(run_id=first.run_id, resume=True)
    assert done.status is RunStatus.COMPLETED
    child = store.load_latest_checkpoint(child_id)
    assert child is not None
    child_usage = (sum((item.get("usage") or {}).get("inputTokens", 0)
                       for item in child.transcript),
                   sum((item.get("usage") or {}).get("outputTokens", 0)
                       for item in child.transcript))
    data = reader.get_metrics_data()
    metrics = {metric.name: metric for resource in data.resource_metrics
               for scope in resource.scope_metrics for metric in scope.metrics}
    yield Traced(list(exporter.get_finished_spans()), metrics, first.run_id, child_id,
                 dict(done.usage), child_usage)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def test_every_span_is_in_the_trace_the_run_id_names(traced: Traced) -> None:
    assert traced.spans
    assert {span.context.trace_id for span in traced.spans} == {trace_id_for(traced.run_id)}
    # the child's own id names the same trace: its root is the parent
    assert trace_id_for(traced.child_id) == trace_id_for(traced.run_id)


def test_each_attempt_is_a_span_linked_to_the_earlier_ones(traced: Traced) -> None:
    attempts = {(span.attributes["agent_runtime.run.id"],
                 span.attributes["agent_runtime.run.attempt"]): span
                for span in traced.named("invoke_agent")}
    assert {span.attributes["gen_ai.agent.name"] for span in attempts.values()} == {
        "traced", "child"}
    assert set(attempts) == {(traced.run_id, 1), (traced.run_id, 2),
                             (traced.child_id, 1), (traced.child_id, 2)}
    first, second = attempts[(traced.run_id, 1)], attempts[(traced.run_id, 2)]
    assert first.parent is None and second.parent is None  # roots of the run's trace
    assert first.context.span_id == attempt_span_id(traced.run_id, 1)
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    assert first.attributes["agent_runtime.run.status"] == "suspended"
    assert first.events[-1].name == "run.suspended"
    assert first.events[-1].attributes["agent_runtime.reason"] == "sub-run"
    assert "checkpoint.saved" not in [event.name for event in first.events]  # commit spans
    assert second.attributes["agent_runtime.run.status"] == "completed"
    assert second.attributes["agent_runtime.run.resumed"] is True
    # each child attempt hangs under the parent's sub-run step of the same attempt
    for number in (1, 2):
        child = attempts[(traced.child_id, number)]
        step = traced.parent_of(child)
        assert step is not None and step.name == "step delegate"
        assert step.attributes["agent_runtime.step.kind"] == "sub-run"
        assert traced.attempt_of(step) is attempts[(traced.run_id, number)]
        assert child.attributes["agent_runtime.run.parent_run_id"] == traced.run_id
    assert attempts[(traced.child_id, 1)].attributes["agent_runtime.run.status"] == "suspended"


def test_steps_iterations_model_and_tool_calls_form_the_tree(traced: Traced) -> None:
    def path_of(span: ReadableSpan) -> list[str]:
        names = []
        current: ReadableSpan | None = span
        while current is not None:
            names.append(current.name)
            current = traced.parent_of(current)
        return names[::-1]

    paths = sorted(" > ".join(path_of(span)) for span in traced.spans
                   if span.name.startswith(("chat", "execute_tool")))
    assert paths == sorted([
        "invoke_agent traced > step ask > chat test",
        "invoke_agent traced > step ask > execute_tool lookup",
        "invoke_agent traced > step ask > chat test",
        "invoke_agent traced > step each > iteration 0 > step say > chat test",
        "invoke_agent traced > step each > iteration 1 > step say > chat test",
        "invoke_agent traced > step delegate > invoke_agent child > step after > chat test",
        "invoke_agent traced > step finish > chat test",
    ])
    says = traced.named("step say")
    assert sorted(span.attributes["agent_runtime.loop.iteration"] for span in says) == [0, 1]
    assert {span.attributes["agent_runtime.step.path"] for span in says} == {
        "each/0/say", "each/1/say"}
    assert traced.named("step each")[0].attributes["agent_runtime.step.kind"] == "loop"
    # the approval step: ended by the child's suspension, then resumed and completed
    waiting, approved = sorted(traced.named("step confirm"), key=lambda span: span.start_time)
    assert [event.name for event in waiting.events] == ["approval.requested", "run.suspended"]
    assert approved.attributes["agent_runtime.step.resumed"] is True
    assert "run.suspended" not in [event.name for event in approved.events]


def test_chat_spans_carry_the_gen_ai_attributes_and_the_runs_token_counts(
        traced: Traced) -> None:
    chats = traced.named("chat ")
    for chat in chats:
        attributes = chat.attributes
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "scripted"
        assert attributes["gen_ai.system"] == "scripted"
        assert attributes["gen_ai.request.model"] == "test"
        assert attributes["gen_ai.response.model"]
        assert list(attributes["gen_ai.response.finish_reasons"]) in (["stop"], ["tool-calls"])
    by_run: dict[str, list[int]] = {}
    for chat in chats:
        run = str(traced.attempt_of(chat).attributes["agent_runtime.run.id"])
        totals = by_run.setdefault(run, [0, 0])
        totals[0] += int(chat.attributes["gen_ai.usage.input_tokens"])
        totals[1] += int(chat.attributes["gen_ai.usage.output_tokens"])
    assert by_run[traced.run_id] == [traced.usage["input_tokens"],
                                     traced.usage["output_tokens"]]
    assert tuple(by_run[traced.child_id]) == traced.child_usage
    tool_span = traced.named("execute_tool")[0]
    assert tool_span.attributes["gen_ai.tool.name"] == "lookup"
    assert tool_span.attributes["gen_ai.operation.name"] == "execute_tool"


def test_each_commit_is_a_span_of_its_attempt(traced: Traced) -> None:
    commits = traced.named("commit")
    assert commits
    for commit in commits:
        assert commit.attributes["agent_runtime.store"] == "MemoryRunStore"
        assert commit.attributes["agent_runtime.checkpoint.seq"] > 0
        assert traced.parent_of(commit) is traced.attempt_of(commit)
        assert commit.end_time >= commit.start_time
    per_run: dict[str, list[int]] = {}
    for commit in commits:
        run = str(traced.attempt_of(commit).attributes["agent_runtime.run.id"])
        per_run.setdefault(run, []).append(int(commit.attributes["agent_runtime.checkpoint.seq"]))
    for seqs in per_run.values():  # every commit of a run once, none lost or doubled
        assert sorted(seqs) == sorted(set(seqs))
    assert traced.metrics["agent_runtime.commit.duration"].data.data_points[0].count == len(
        commits)


def test_metrics_count_tokens_model_time_and_attempts(traced: Traced) -> None:
    tokens = traced.metrics["gen_ai.client.token.usage"].data.data_points
    summed = {point.attributes["gen_ai.token.type"]: point.sum for point in tokens}
    expected_input = traced.usage["input_tokens"] + traced.child_usage[0]
    expected_output = traced.usage["output_tokens"] + traced.child_usage[1]
    assert summed == {"input": expected_input, "output": expected_output}
    durations = traced.metrics["gen_ai.client.operation.duration"].data.data_points
    assert sum(point.count for point in durations) == len(traced.named("chat "))
    started = traced.metrics["agent_runtime.runs.started"].data.data_points
    assert sum(point.value for point in started) == 4
    finished = {point.attributes["agent_runtime.run.status"]: point.value
                for point in traced.metrics["agent_runtime.runs.finished"].data.data_points}
    assert finished == {"suspended": 2, "completed": 2}


def test_no_canary_reaches_a_span(traced: Traced) -> None:
    """Acceptance 4: what a user or a model wrote is in no name, attribute, event or
    link of any span (content capture is not implemented, whatever
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT says)."""
    text = "\n".join(span.to_json() for span in traced.spans)
    text += json.dumps([str(metric) for metric in traced.metrics.values()])
    assert "lookup" in text and "scripted" in text  # what may be said is said
    for planted in CANARIES:
        assert planted not in text
