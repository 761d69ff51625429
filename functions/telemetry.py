"""Logs and metrics of the functions: Powertools Logger and Metrics (CloudWatch EMF).

What reaches them is ids, statuses, counts and error codes — never prompt
text, model output or variable values. Engine events already carry only
those (agent_runtime/events.py); the handlers log requests field by field,
never an event or a result whole; and a run's output stays in the store.
tests/functions/test_telemetry.py runs a run whose variable, prompt and model
output hold a canary string and checks none of it was logged.

Metrics: one count per outcome of each handler (`RunReserved`,
`AdvanceContinued`, `RunSuspended`, `ExecutionStarted`, ...), each published
on its own (`single_metric`), so an invocation's metrics never depend on
another's shared state.
"""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from agent_runtime.events import Event

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "agent-runtime"
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "AgentRuntime"

logger = Logger(service=SERVICE)

# Frequent and uninformative at INFO: streamed-text counters and heartbeats.
_DEBUG_EVENTS = frozenset({"model.text.delta", "run.heartbeat"})


def count(outcome: str, value: int = 1) -> None:
    """Publish one outcome metric (a CloudWatch EMF line on stdout)."""
    with single_metric(name=outcome, unit=MetricUnit.Count, value=value, namespace=NAMESPACE,
                       default_dimensions={"service": SERVICE}):
        pass


class LogEventSink:
    """Engine and reconciler events as structured log lines."""

    def emit(self, event: Event) -> None:
        fields = {"run_event": event.to_json()}
        if event.type in _DEBUG_EVENTS:
            logger.debug(event.type, extra=fields)
        else:
            logger.info(event.type, extra=fields)
