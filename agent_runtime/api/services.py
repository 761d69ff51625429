"""What the HTTP API's routes are given: the store, a runtime, a launcher, an authenticator.

The routes (`agent_runtime.api.routes`) are written once and served two ways:
on AWS by `functions/api/app.py` behind API Gateway, locally by
`agent-runtime serve`. They never import boto3 and never execute a run
themselves; what differs between the two places is injected here:

* `Launcher` gets a stored run executed: locally an asyncio task on one of
  `serve`'s event loops, over the same store; on AWS a resume request recorded
  in the store plus an EventBridge event that starts the state machine.
* `RunCapacity` (locally; none on AWS, where the reconciler's capacity slots
  bound the executions) holds a place for a run a request is about to start
  or resume, so that at the bound the request is answered 429 before it
  stores anything.
* `Authenticator` turns a request into the caller's tenant: locally a bearer
  token, on AWS the IAM principal or a JWT claim that API Gateway verified.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from stores.base import RunStore
from stores.records import Budget, RunRecord

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from agent_runtime.engine import AgentRuntime


# An output answer's floor: a part's envelope (~1 KiB) and room for data.
MIN_OUTPUT_ANSWER_BYTES = 4 * 1024
# API Gateway ends a request its integration has not answered in 29 s: a long-poll
# must answer before, with room for the Lambda's own work.
MAX_EVENTS_WAIT_SECONDS = 25.0


class Unauthenticated(Exception):
    """The request carries no acceptable credentials (HTTP 401)."""


class Launcher(Protocol):
    """Gets stored runs executed somewhere other than the request that asked."""

    def start(self, run: RunRecord) -> None:
        """A new run was stored (status `created`, attempt 0): execute its first attempt.

        Returns once the start is durably requested, not when the run ends.
        A run that cannot be started now stays `created`, where the
        reconciler finds it (`list_runs(lease_expired_before=...)`).
        """

    def resume(self, run: RunRecord, *, reason: str, budget: Budget | None = None) -> None:
        """A suspended run should continue: record the request, then execute the next attempt.

        Records `store.request_resume(run_id, reason=...)` first, so a lost
        start is picked up by the reconciler. `budget` replaces the run's
        persisted token limit for the resumed attempt (None keeps it).
        """


class AtCapacity(Exception):
    """This host starts no more runs now: the request is answered `status` (429 at the
    bound, 503 while the server stops) with `Retry-After: retry_after`."""

    def __init__(self, detail: str, *, retry_after: int, status: int = 429) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after
        self.status = status


class RunCapacity(Protocol):
    """How many runs this host executes at once, asked by the routes that start or resume one."""

    def admit(self, tenant: str | None) -> AbstractContextManager[object]:
        """Hold a place for one run of `tenant`, or raise `AtCapacity` when none is free.

        Use it as a context manager around everything the request does: the
        start or resume it hands to the launcher inside the block takes the
        place; when it hands none (the request failed, the run moved on), the
        place is given back as the block ends.
        """
        ...


class Authenticator(Protocol):
    """Who is calling: the tenant whose runs the request may see and change."""

    def tenant(self, event: BaseProxyEvent) -> str:
        """The caller's tenant; raises `Unauthenticated` when the request has none."""
        ...


@dataclass(frozen=True)
class ApiLimits:
    """Bounds on what one request may ask for."""

    # A request body larger than this is refused with 413 before it is parsed.
    max_body_bytes: int = 1_000_000
    # `GET /runs?limit=` and the checkpoint timeline page at most this many rows.
    max_page_size: int = 100
    # A run's view (alone, or in a page of runs) shows its output when the output's
    # JSON text is at most this long; a larger one is named by reference instead
    # (`outputRef`, `outputBytes`) and `GET /runs/{runId}/output` returns it.
    max_inline_output_bytes: int = 16 * 1024
    # A page of `GET /runs` ends before the run whose view would take its JSON past
    # this; its cursor continues there. A page holds one run whatever its size.
    max_page_bytes: int = 1024 * 1024
    # `GET /runs/{runId}/output` answers the whole output only when its body, as a
    # Lambda response carries it (JSON-escaped), is at most this; a larger one is
    # answered in parts, each within it (agent_runtime/api/output_parts.py). Below
    # Lambda's 6 MB response limit with room for headers.
    max_output_answer_bytes: int = 4 * 1024 * 1024
    # `GET /runs/{runId}/events?wait=` waits at most this long for an event (capped
    # below API Gateway's integration timeout), looking every `events_poll_seconds`.
    max_events_wait_seconds: float = 20.0
    events_poll_seconds: float = 0.5
    # `serve`'s event streams (text/event-stream): each ends after this long (the
    # client reconnects with Last-Event-ID), with a comment every keep-alive.
    max_event_stream_seconds: float = 300.0
    event_stream_keepalive_seconds: float = 15.0

    def __post_init__(self) -> None:
        if not 0 <= self.max_events_wait_seconds <= MAX_EVENTS_WAIT_SECONDS:
            raise ValueError(f"ApiLimits.max_events_wait_seconds must be 0..."
                             f"{MAX_EVENTS_WAIT_SECONDS:g} (API Gateway ends a request at "
                             f"29 s), not {self.max_events_wait_seconds}")
        if not 0 < self.events_poll_seconds <= 10:
            raise ValueError(f"ApiLimits.events_poll_seconds must be in (0, 10], not "
                             f"{self.events_poll_seconds}")
        if self.max_event_stream_seconds <= 0 or self.event_stream_keepalive_seconds <= 0:
            raise ValueError("ApiLimits.max_event_stream_seconds and "
                             "event_stream_keepalive_seconds must be positive")
        if self.max_output_answer_bytes < MIN_OUTPUT_ANSWER_BYTES:
            raise ValueError(f"ApiLimits.max_output_answer_bytes must be at least "
                             f"{MIN_OUTPUT_ANSWER_BYTES} bytes, not "
                             f"{self.max_output_answer_bytes}")


@dataclass
class ApiServices:
    """Everything the routes use. Built once per process (or Lambda container)."""

    store: RunStore
    # Validates manifests and variables, creates runs and forks, records approvals:
    # the runtime, or what builds it, called when a route first needs one (`engine`).
    # The routes that only read runs need none, so a host that builds its services
    # per container (the API's Lambda) loads the engine only for a request that does.
    runtime: AgentRuntime | Callable[[], AgentRuntime]
    launcher: Launcher
    authenticator: Authenticator
    limits: ApiLimits = field(default_factory=ApiLimits)
    # The places of the runs this host executes at once, when it bounds them itself.
    capacity: RunCapacity | None = None
    # Routes may run on several threads at once (`serve`): one builds the runtime.
    _building: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False,
                                      compare=False)

    def engine(self) -> AgentRuntime:
        """The runtime, built now if it was given as what builds it (then kept)."""
        runtime = self.runtime
        if not callable(runtime):  # an AgentRuntime is not callable: what builds one
            return runtime
        with self._building:
            runtime = self.runtime
            if callable(runtime):
                runtime = self.runtime = runtime()
            return runtime
