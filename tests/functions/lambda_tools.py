"""A Python tool the functions load from their runtime config (`tools:` module:function).

Imported as `tests.functions.lambda_tools` by both the config and the tests,
so they share one execution log: the outside world that shows whether an
effect ran once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agent_runtime import ToolContext, tool

EXECUTIONS: list[tuple[str, str]] = []


@tool
def record_order(order_id: str, ctx: ToolContext) -> dict[str, str]:
    """Record an order in the outside world."""
    EXECUTIONS.append((ctx.idempotency_key, order_id))
    return {"recorded": order_id}


# How long the next calls of the slow tools take, in seconds (then none):
# tests set it to have a call outlast its slice.
DELAYS: list[float] = []
# The idempotency keys the slow tools were called with, as each call began.
STARTED: list[str] = []


async def _take_time(ctx: ToolContext) -> None:
    STARTED.append(ctx.idempotency_key)
    if DELAYS:
        await asyncio.sleep(DELAYS.pop(0))


@tool
async def slow_order(order_id: str, ctx: ToolContext) -> dict[str, str]:
    """Record an order in the outside world, slowly; safe to repeat with the same key."""
    await _take_time(ctx)
    EXECUTIONS.append((ctx.idempotency_key, order_id))
    return {"recorded": order_id}


@tool(idempotent=False)
async def charge_card(order_id: str, ctx: ToolContext) -> dict[str, str]:
    """Charge a card, slowly: not safe to repeat."""
    await _take_time(ctx)
    EXECUTIONS.append((ctx.idempotency_key, order_id))
    return {"charged": order_id}


# The clock the functions read (a test's FakeClock), and how far `pass_time` moves it.
CLOCKS: list[Any] = []


@tool
def pass_time(seconds: float) -> str:
    """Let time pass on the functions' clock."""
    CLOCKS[0].advance(seconds)
    return "done"
