"""A Python tool the functions load from their runtime config (`tools:` module:function).

Imported as `tests.functions.lambda_tools` by both the config and the tests,
so they share one execution log: the outside world that shows whether an
effect ran once.
"""

from __future__ import annotations

from agent_runtime import ToolContext, tool

EXECUTIONS: list[tuple[str, str]] = []


@tool
def record_order(order_id: str, ctx: ToolContext) -> dict[str, str]:
    """Record an order in the outside world."""
    EXECUTIONS.append((ctx.idempotency_key, order_id))
    return {"recorded": order_id}
