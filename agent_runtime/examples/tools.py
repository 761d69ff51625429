"""Python tools for the examples: `agent-runtime run ... --tools examples/tools.py`."""

from __future__ import annotations

from agent_runtime import ToolContext, tool

_TICKETS = {
    "T-1001": {"title": "Card payments time out at checkout", "customers_affected": 412,
               "opened_hours_ago": 2},
    "T-1002": {"title": "Invoice PDF shows the wrong VAT number", "customers_affected": 3,
               "opened_hours_ago": 30},
    "T-1003": {"title": "Refund emails arrive twice", "customers_affected": 57,
               "opened_hours_ago": 8},
}


@tool
def lookup_ticket(ticket_id: str, ctx: ToolContext) -> dict[str, object]:
    """Look up a support ticket by id.

    Args:
        ticket_id: The ticket id, e.g. T-1001.
    """
    ticket = _TICKETS.get(ticket_id)
    if ticket is None:
        raise LookupError(f"no ticket {ticket_id}")
    # A real tool would pass ctx.idempotency_key to the system it calls, so a
    # retried call after a crash is recognised there as the same call.
    return {"id": ticket_id, **ticket, "request_key": ctx.idempotency_key}
