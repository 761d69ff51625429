"""The tracer and meter providers the standard `OTEL_*` environment variables describe.

Read as the SDK documents them: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`
(the resource), `OTEL_TRACES_EXPORTER` and `OTEL_METRICS_EXPORTER` (`otlp`, the
default once telemetry is on, `console` or `none`), the `OTEL_EXPORTER_OTLP_*`
endpoint, headers, timeout and compression, `OTEL_BSP_*` (span batching) and
`OTEL_METRIC_EXPORT_INTERVAL`. OTLP goes over HTTP with protobuf bodies; a
`grpc` protocol is refused by name (a warning) in favour of it, since the
`otel` extra ships no gRPC stack.
"""

from __future__ import annotations

import logging
import os
import random

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from agent_runtime.telemetry.spans import TelemetrySink
from agent_runtime.telemetry.trace_ids import next_ids

logger = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "agent-runtime"
# The GenAI conventions' opt-in to message content: not implemented (docs/telemetry.md).
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


class ChosenIds(IdGenerator):
    """Random ids, except for the span `next_ids` names: a run attempt's, whose trace
    id and span id are computed from the run id (trace_ids.py)."""

    def __init__(self) -> None:
        self._random = random.SystemRandom()

    def generate_span_id(self) -> int:
        chosen = next_ids.get()[1]
        return chosen if chosen is not None else self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        chosen = next_ids.get()[0]
        return chosen if chosen is not None else self._random.getrandbits(128) or 1


def _exporters(variable: str) -> list[str]:
    names = [name.strip().lower() for name in os.environ.get(variable, "otlp").split(",")]
    return [name for name in names if name and name != "none"]


def _check_protocol(signal: str) -> None:
    protocol = (os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    if protocol.strip().lower() != "http/protobuf":
        logger.warning("OTEL_EXPORTER_OTLP_PROTOCOL %r is not supported: exporting "
                       "%s over http/protobuf", protocol, signal.lower())


def resource() -> Resource:
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {
        SERVICE_NAME: DEFAULT_SERVICE_NAME}
    return Resource.create(attributes)


def tracer_provider(resource_: Resource) -> TracerProvider:
    provider = TracerProvider(resource=resource_, id_generator=ChosenIds())
    for name in _exporters("OTEL_TRACES_EXPORTER"):
        exporter: SpanExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )
            _check_protocol("TRACES")
            exporter = OTLPSpanExporter()
        elif name == "console":
            exporter = ConsoleSpanExporter()
        else:
            logger.warning("OTEL_TRACES_EXPORTER %r is not supported (otlp, console, none)",
                           name)
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def meter_provider(resource_: Resource) -> MeterProvider:
    readers: list[MetricReader] = []
    for name in _exporters("OTEL_METRICS_EXPORTER"):
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # noqa: PLC0415
                OTLPMetricExporter,
            )
            _check_protocol("METRICS")
            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        elif name == "console":
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
        else:
            logger.warning("OTEL_METRICS_EXPORTER %r is not supported (otlp, console, none)",
                           name)
    return MeterProvider(resource=resource_, metric_readers=readers)


def sink_from_environment() -> TelemetrySink:
    """The process's sink over providers of its own (the global ones are left to the
    host): both shut down, exporting what they hold, when the process exits."""
    if os.environ.get(CAPTURE_CONTENT, "").strip().lower() == "true":
        logger.warning("%s=true: content capture is not supported; spans carry no "
                       "prompt, output, variable or tool-argument text", CAPTURE_CONTENT)
    resource_ = resource()
    return TelemetrySink(tracer_provider(resource_), meter_provider(resource_),
                         chosen_ids=True)


__all__ = ["ChosenIds", "meter_provider", "resource", "sink_from_environment",
           "tracer_provider"]
