"""Logs and metrics of the functions: Powertools Logger and Metrics (CloudWatch EMF).

What reaches them is ids, statuses, counts and error codes — never prompt
text, model output or variable values. Engine events already carry only
those (agent_runtime/events.py: a tool the model named is a fingerprint and a
length); `LogEventSink` still bounds and escapes every string it logs, so a
field added to an event by mistake cannot put a whole value or a terminal
escape into the logs. The handlers log requests field by field, never a
result whole; and a run's output stays in the store.
tests/functions/test_telemetry.py runs a run whose variable, prompt and model
output hold a canary string and checks none of it was logged;
tests/agent_runtime/test_data_policy.py does the same for a model's tool
names, call ids and answers.

Metrics: one count per outcome of each handler (`RunReserved`,
`AdvanceContinued`, `RunSuspended`, `ExecutionStarted`, ...), each published
on its own (`single_metric`), so an invocation's metrics never depend on
another's shared state.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from agent_runtime.excerpts import EXCERPT_LIMIT, excerpt

if TYPE_CHECKING:
    # A type only: events come from the engine or the reconciler, which load
    # their module; a handler that runs neither (start, retention) never does.
    from agent_runtime.events import Event

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "agent-runtime"
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "AgentRuntime"

logger = Logger(service=SERVICE)

# Frequent and uninformative at INFO: streamed-text counters and heartbeats.
_DEBUG_EVENTS = frozenset({"model.text.delta", "model.reasoning.delta", "run.heartbeat"})


def count(outcome: str, value: int = 1) -> None:
    """Publish one outcome metric (a CloudWatch EMF line on stdout)."""
    with single_metric(name=outcome, unit=MetricUnit.Count, value=value, namespace=NAMESPACE,
                       default_dimensions={"service": SERVICE}):
        pass


def _bounded(value: Any) -> Any:
    """`value` with every string short and plain: ids, codes and statuses pass
    as they are; anything long or holding control characters is an excerpt."""
    if isinstance(value, str):
        return value if len(value) <= EXCERPT_LIMIT and value.isprintable() else excerpt(value)
    if isinstance(value, dict):
        return {_bounded(str(key)): _bounded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_bounded(item) for item in value]
    return value


class LogEventSink:
    """Engine and reconciler events as structured log lines."""

    def emit(self, event: Event) -> None:
        fields = {"run_event": _bounded(event.to_json())}
        if event.type in _DEBUG_EVENTS:
            logger.debug(event.type, extra=fields)
        else:
            logger.info(event.type, extra=fields)
