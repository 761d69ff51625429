"""TelemetrySink on single events: Lambda slices, failures, and a provider that
chooses its own ids (docs/telemetry.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent_runtime.events import Event
from agent_runtime.telemetry.setup import ChosenIds
from agent_runtime.telemetry.spans import TelemetrySink
from agent_runtime.telemetry.trace_ids import (
    attempt_span_id,
    parse_traceparent,
    run_span_id,
    trace_id_for,
    trace_root,
)


class Feed:
    def __init__(self, *, chosen_ids: bool = True) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider(id_generator=ChosenIds()) if chosen_ids else TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.sink = TelemetrySink(provider, chosen_ids=chosen_ids)
        self.sequence = 0

    def __call__(self, type_: str, run_id: str = "r1", attempt: int = 1,
                 step_path: str | None = None, **data: Any) -> None:
        self.sequence += 1
        self.sink.emit(Event(id=str(self.sequence), run_id=run_id, attempt=attempt,
                             sequence=self.sequence, timestamp=datetime.now(UTC), type=type_,
                             step_id=None if step_path is None else step_path.split("/")[-1],
                             step_path=step_path, data=data))

    def spans(self) -> dict[str, Any]:
        return {span.name: span for span in self.exporter.get_finished_spans()}


def test_trace_roots_are_the_ids_before_the_first_sub_run_mark() -> None:
    assert trace_root("run_1.sub-abc.sub-def") == "run_1"
    assert trace_root("run_1") == "run_1"
    assert trace_id_for("run_1.sub-abc") == trace_id_for("run_1") != trace_id_for("run_2")


def test_a_later_slice_hangs_under_its_attempts_first_span_and_ends_as_running() -> None:
    feed = Feed()
    feed("run.resumed", attempt=3, from_seq=4, continues=True)
    feed("step.started", attempt=3, step_path="a", kind="prompt")
    feed.sink.end_open_attempts()  # the Lambda invocation ends at its deadline
    spans = feed.spans()
    attempt = spans["invoke_agent"]
    assert attempt.parent is not None
    assert attempt.parent.span_id == attempt_span_id("r1", 3)
    assert attempt.context.span_id != attempt_span_id("r1", 3)  # not a second first span
    assert attempt.context.trace_id == trace_id_for("r1")
    assert attempt.attributes["agent_runtime.run.status"] == "running"
    assert not attempt.links
    assert spans["step a"].events[-1].name == "run.running"


def test_a_failed_run_marks_its_open_spans_and_attempt_as_errors() -> None:
    feed = Feed()
    feed("run.started")
    feed("step.started", step_path="s", kind="prompt")
    feed("model.started", step_path="s", provider="openai", model="gpt-x", request=1)
    feed("run.failed", error_type="model_error")
    spans = feed.spans()
    assert spans["invoke_agent"].status.status_code is StatusCode.ERROR
    assert spans["invoke_agent"].attributes["error.type"] == "model_error"
    assert spans["chat gpt-x"].status.status_code is StatusCode.ERROR
    assert spans["step s"].status.status_code is StatusCode.ERROR


def test_a_provider_with_its_own_ids_still_puts_spans_in_the_runs_trace() -> None:
    feed = Feed(chosen_ids=False)
    feed("run.started", run_id="r9.sub-1")
    feed("run.completed", run_id="r9.sub-1")
    attempt = feed.spans()["invoke_agent"]
    assert attempt.context.trace_id == trace_id_for("r9")
    assert attempt.parent is not None and attempt.parent.span_id == run_span_id("r9.sub-1")


def test_events_of_attempts_it_never_saw_begin_are_ignored() -> None:
    feed = Feed()
    feed("step.started", step_path="s", kind="prompt")
    feed("reconcile.resumed", run_id="", attempt=0)
    assert feed.spans() == {}


CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(("header", "kept"), [
    (CALLER, CALLER),
    (CALLER.replace("-01", "-00"), CALLER.replace("-01", "-00")),
    ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", CALLER),
    (CALLER + "-extra", None),                 # version 00 has exactly four fields
    (CALLER.upper(), None),                    # lower-case hex only
    ("ff" + CALLER[2:], None),                 # an invalid version
    (f"00-{'0' * 32}-00f067aa0ba902b7-01", None),
    (f"00-4bf92f3577b34da6a3ce929d0e0e4736-{'0' * 16}-01", None),
    ("00-4bf92f35-00f067aa0ba902b7-01", None),
    ("", None), (None, None), ("x" * 10_000, None),
])
def test_only_a_valid_traceparent_is_kept(header: str | None, kept: str | None) -> None:
    assert parse_traceparent(header) == kept


def test_a_run_created_under_a_traceparent_continues_the_callers_trace() -> None:
    feed = Feed()
    feed("run.started", trace_parent=CALLER)
    feed("run.completed")
    feed("run.resumed", attempt=2, trace_parent=CALLER)  # a takeover: the option is kept
    feed("run.completed", attempt=2)
    first, second = sorted((span for span in feed.exporter.get_finished_spans()),
                           key=lambda span: span.attributes["agent_runtime.run.attempt"])
    for attempt in (first, second):
        assert f"{attempt.context.trace_id:032x}" == CALLER[3:35]
        assert attempt.parent is not None and f"{attempt.parent.span_id:016x}" == CALLER[36:52]
    assert [link.context.span_id for link in second.links] == [first.context.span_id]


def test_a_takeover_is_counted_and_marked_on_its_attempt() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=ChosenIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = TelemetrySink(provider, MeterProvider(metric_readers=[reader]), chosen_ids=True)
    for attempt, data in ((1, {}), (2, {"takeover": True}), (3, {})):
        sink.emit(Event(id=str(attempt), run_id="r1", attempt=attempt, sequence=1,
                        timestamp=datetime.now(UTC),
                        type="run.started" if attempt == 1 else "run.resumed", data=data))
        sink.emit(Event(id=f"{attempt}-end", run_id="r1", attempt=attempt, sequence=2,
                        timestamp=datetime.now(UTC), type="run.suspended",
                        data={"reason": "approval"}))
    metrics = reader.get_metrics_data()
    assert metrics is not None
    counted = {metric.name: sum(point.value for point in metric.data.data_points)
               for resource in metrics.resource_metrics for scope in resource.scope_metrics
               for metric in scope.metrics}
    assert counted["agent_runtime.lease.takeovers"] == 1
    assert counted["agent_runtime.runs.started"] == 3
    marked = sorted((span.attributes["agent_runtime.run.attempt"],
                     span.attributes.get("agent_runtime.run.takeover"))
                    for span in exporter.get_finished_spans() if span.name == "invoke_agent")
    assert marked == [(1, None), (2, True), (3, None)]
