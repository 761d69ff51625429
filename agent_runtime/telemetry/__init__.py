"""OpenTelemetry traces and metrics of runs, on when the standard `OTEL_*`
environment variables ask for them (docs/telemetry.md).

This module imports nothing of OpenTelemetry: a host that configured none pays
one look at its environment (`enabled`), and `agent-runtime` starts as fast as
before. `event_sinks()` is what hosts call; it loads the SDK only when on.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping

from agent_runtime.events import EventSink

logger = logging.getLogger(__name__)

# Any of these set (and the SDK not disabled) turns telemetry on. The SDK's own
# default exporter is OTLP to localhost; ours is nothing unless asked.
SWITCHES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_TRACES_EXPORTER",
            "OTEL_METRICS_EXPORTER")


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in SWITCHES)


_lock = threading.Lock()
_sinks: list[EventSink] | None = None


def event_sinks() -> list[EventSink]:
    """The process's telemetry sink (one, shared by all its runtimes), or none when
    telemetry is not configured or the `otel` extra is not installed (a warning)."""
    global _sinks  # noqa: PLW0603 - one tracer and meter provider per process
    if not enabled():
        return []
    with _lock:
        if _sinks is None:
            try:
                from agent_runtime.telemetry.setup import sink_from_environment  # noqa: PLC0415
            except ImportError as error:
                logger.warning("OTEL_* is set but OpenTelemetry is not installed (%s): "
                               "install agent-runtime-durable[otel]; no telemetry", error.name)
                _sinks = []
            else:
                _sinks = [sink_from_environment()]
        return list(_sinks)


def flush(timeout_millis: int = 5000, *, end_open: bool = False) -> None:
    """Export what is buffered now (a Lambda invocation ends; its container may freeze);
    `end_open`: end the spans of attempts still running first (a slice that stopped
    at its deadline)."""
    for sink in list(_sinks or []):
        end = getattr(sink, "end_open_attempts", None)
        if end_open and end is not None:
            end()
        flush_sink = getattr(sink, "flush", None)
        if flush_sink is not None:
            flush_sink(timeout_millis)


__all__ = ["SWITCHES", "enabled", "event_sinks", "flush"]
