"""GET /runs: a page of the caller's runs, newest first, answering an operator's
search (status, parent, agent, id prefix, creation time) from the store's own
queries (`RunStore.list_runs`: its indexes, never a read of every run).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from stores.records import RunStatus

from agent_runtime.api.problems import ApiProblem
from agent_runtime.api.route_context import decode_cursor, encode_cursor, json_response
from agent_runtime.api.services import ApiServices
from agent_runtime.api.wire import RUN_ID_PATTERN, RunList, run_page

# An agent is a manifest's id or name: no longer than this is searched for.
MAX_AGENT_LENGTH = 200
# An ISO 8601 time with its zone: the zone is required, so no two servers read one
# search differently.
_TIME_PATTERN = (r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?"
                 r"(Z|[+-]\d{2}:\d{2})$")
_TIME_DESCRIPTION = "an ISO 8601 date and time with its zone (`2026-01-31T14:00:00Z`)"

StatusParam = Annotated[RunStatus | None, Query(description="Only runs with this status")]
ParentParam = Annotated[str | None, Query(pattern=RUN_ID_PATTERN,
                                          description="Only this run's sub-runs")]
AgentParam = Annotated[str | None, Query(
    min_length=1, max_length=MAX_AGENT_LENGTH,
    description="Only runs of this agent: the manifest's `id`, or its `name` when it "
                "has no id (exact, case-sensitive)")]
IdPrefixParam = Annotated[str | None, Query(
    pattern=RUN_ID_PATTERN,
    description="Only runs whose id starts with this (case-sensitive)")]
CreatedAfterParam = Annotated[str | None, Query(
    max_length=40,
    description=f"Only runs created at or after this time: {_TIME_DESCRIPTION}")]
CreatedBeforeParam = Annotated[str | None, Query(
    max_length=40,
    description=f"Only runs created before this time: {_TIME_DESCRIPTION}")]


@dataclass(frozen=True)
class RunQuery:
    """What GET /runs was asked for, checked: every filter ANDed."""

    status: RunStatus | None = None
    parent: str | None = None
    agent: str | None = None
    id_prefix: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


def search_time(value: str | None, parameter: str) -> datetime | None:
    """The UTC time of a search parameter; 422 naming `parameter` when it is not an ISO
    8601 date and time with its zone."""
    if value is None:
        return None
    problem = ApiProblem(422, f"`{parameter}` is not {_TIME_DESCRIPTION}", field=parameter)
    if re.fullmatch(_TIME_PATTERN, value) is None:
        raise problem
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:  # a month 13, a 25th hour
        raise problem from None
    if moment.tzinfo is None:  # the pattern requires a zone; kept as the rule it is
        raise problem
    return moment.astimezone(UTC)


def list_runs(services: ApiServices, tenant: str, query: RunQuery, limit: int,
              cursor: str | None) -> Response[str]:
    """A page of `tenant`'s runs matching `query`, newest first: at most `limit` (and
    `max_page_size`) runs, ending early before the run that would take the page's JSON
    past `max_page_bytes`."""
    limits = services.limits
    page = services.store.list_runs(
        statuses=None if query.status is None else [query.status],
        parent_run_id=query.parent, tenant=tenant, agent=query.agent,
        run_id_prefix=query.id_prefix, created_after=query.created_after,
        created_before=query.created_before, newest_first=True,
        limit=min(limit, limits.max_page_size), cursor=decode_cursor(cursor))
    views = run_page(page.runs, max_output_bytes=limits.max_inline_output_bytes,
                     max_page_bytes=limits.max_page_bytes)
    # A store's cursor is the last run id it returned, and a run id continues a
    # listing after that run (the store contract's conformance suite holds
    # every backend to it), so a page cut short continues after its last run.
    more = page.cursor if len(views) == len(page.runs) else views[-1].run_id
    return json_response(200, RunList(runs=views, cursor=encode_cursor(more)))
