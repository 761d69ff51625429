"""The HTTP API's routes: one Powertools `Router`, served on API Gateway and by `serve`.

    resolver = APIGatewayHttpResolver(enable_validation=True)   # or HttpResolverLocal
    build_api(resolver, services)

Every route acts for the caller's tenant (`services.authenticator`) and sees
only that tenant's runs: another tenant's run is 404, exactly like a missing
one. Routes never execute a run: they store it and hand it to
`services.launcher`. A route that starts or resumes a run first holds a place
for it (`services.capacity`, when the host bounds its runs itself): with none
free it answers 429 (503 while the server stops) with Retry-After before it
stores or records anything. Errors are mapped once, in `agent_runtime.api.problems`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver, Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from pydantic import BaseModel
from stores.base import RunKeyTaken
from stores.records import Budget, RunRecord, RunStatus

from agent_runtime.api import guard
from agent_runtime.api.event_wire import EventPage
from agent_runtime.api.output_parts import output_answer
from agent_runtime.api.problems import (
    ApiProblem,
    excerpt,
    problem_schema_responses,
    register_problem_handlers,
)
from agent_runtime.api.run_events import wait_for_events
from agent_runtime.api.services import ApiServices, AtCapacity
from agent_runtime.api.submission import (
    agent_from_request,
    request_fingerprint,
)
from agent_runtime.api.tenant_quota import check_quota
from agent_runtime.api.wire import (
    CURSOR_PATTERN,
    IDEMPOTENCY_KEY_PATTERN,
    KEY_PATTERN,
    MAX_TOKENS,
    RUN_ID_PATTERN,
    ApprovalRequest,
    Caller,
    CheckpointEnvelope,
    CheckpointList,
    CrashLoopResumes,
    CreateRunRequest,
    EffectList,
    ForkRequest,
    ResumeRequest,
    RunEnvelope,
    RunList,
    RunOutput,
    SettleEffectRequest,
    checkpoint_state,
    checkpoint_summary,
    effect_list,
    run_envelope,
    run_page,
    to_json,
)
from agent_runtime.console import CONSOLE_HEADERS, console_page
from agent_runtime.crash_loops import crash_looped_page
from agent_runtime.effect_owners import effect_owners
from agent_runtime.limits import use_limits
from agent_runtime.run_ids import run_key
from agent_runtime.run_options import REQUEST_SHA256
from agent_runtime.telemetry.trace_ids import TRACE_PARENT, parse_traceparent

JSON = "application/json"
# `limit` may ask for up to this many rows; `ApiLimits.max_page_size` caps what a page holds.
MAX_LIMIT = 1000
# `wait` may ask for up to this many seconds; `ApiLimits.max_events_wait_seconds` caps it.
MAX_WAIT = 60
# Past any output a policy allows (`maxRunOutputBytes` is at most 2**31).
MAX_OUTPUT_OFFSET = 2**31

RunId = Annotated[str, Path(pattern=RUN_ID_PATTERN, description="A run id")]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many rows (the "
                                                             "server may return fewer)")]
Cursor = Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                     description="The `cursor` of the previous page")]


def json_response(status: int, model: BaseModel,
                  headers: dict[str, str] | None = None) -> Response[str]:
    return Response(status_code=status, content_type=JSON, body=to_json(model), headers=headers)


def _responses(status: int, model: type[BaseModel], description: str, *problems: int,
               body: bool = False) -> dict[int, Any]:
    """A route's documented responses: its success, and the problems it may answer."""
    common = (400, 401, 403, 404, 413, 422, 500, 503) + ((415,) if body else ())
    return {status: {"description": description, "content": {JSON: {"model": model}}},
            **problem_schema_responses(*sorted({*common, *problems}))}


def encode_cursor(text: str | None) -> str | None:
    return None if text is None else base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    if cursor is None:
        return None
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, ValueError):
        raise ApiProblem(422, "not a cursor this API returned", field="cursor") from None


class RunRoutes:
    """The routes, bound to the services they use (None only to describe them)."""

    def __init__(self, services: ApiServices | None) -> None:
        self._services = services
        self.router = Router()  # type: ignore[no-untyped-call]
        self.protected: set[Callable[..., Any]] = set()
        self._table: list[tuple[str, re.Pattern[str]]] = []
        self._register()

    @property
    def services(self) -> ApiServices:
        if self._services is None:
            raise RuntimeError("these routes were built only to describe the API")
        return self._services

    def allowed_methods(self, path: str) -> list[str]:
        return sorted({method for method, rule in self._table if rule.fullmatch(path)})

    def _route(self, method: str, rule: str, *, public: bool = False,
               **options: Any) -> Callable[[Any], Any]:
        self._table.append((method, re.compile(re.sub(r"<\w+>", "[^/]+", rule))))

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            if not public:
                self.protected.add(func)
            return self.router.route(rule, method, enable_validation=True, **options)(func)
        return register

    # -- what every route uses ---------------------------------------------------

    def tenant(self) -> str:
        tenant = self.router.context.get(guard.TENANT)
        if isinstance(tenant, str):
            return tenant
        return self.services.authenticator.tenant(self.router.current_event)

    def visible_run(self, run_id: str) -> RunRecord:
        """The caller's run; 404 when missing or another tenant's (never said which)."""
        tenant = self.tenant()
        record = None if ".." in run_id else self.services.store.load_run(run_id)
        if record is None or record.tenant != tenant:
            raise ApiProblem(404, "no such run")
        return record

    def run_response(self, status: int, record: RunRecord,
                     headers: dict[str, str] | None = None) -> Response[str]:
        """`{run}`, its output shown only when small (`ApiLimits.max_inline_output_bytes`)."""
        envelope = run_envelope(record,
                                max_output_bytes=self.services.limits.max_inline_output_bytes)
        return json_response(status, envelope, headers)

    @contextlib.contextmanager
    def place_for_a_run(self) -> Iterator[None]:
        """Hold a place for the run the block starts or resumes (`RunCapacity`), or answer
        429 (503 while the server stops) with Retry-After before anything is stored."""
        capacity = self.services.capacity
        if capacity is None:
            yield
            return
        try:
            place = capacity.admit(self.tenant())
        except AtCapacity as full:
            raise ApiProblem(full.status, full.detail,
                             headers={"Retry-After": str(full.retry_after)}) from None
        with place:
            yield

    def reload(self, run_id: str) -> RunRecord:
        record = self.services.store.load_run(run_id)
        if record is None:  # deleted meanwhile (retention)
            raise ApiProblem(404, "no such run")
        return record

    # -- the routes ----------------------------------------------------------------

    def _register(self) -> None:
        self._register_runs()
        self._register_history()
        self._register_actions()
        self._register_console()
        self._register_caller()

        @self._route("GET", "/openapi.json", public=True, operation_id="getOpenApi",
                     summary="This API's OpenAPI document (needs no credentials)",
                     openapi_extensions={"security": []},
                     responses={200: {"description": "The OpenAPI 3.1 document",
                                      "content": {JSON: {"schema": {"type": "object"}}}},
                                **problem_schema_responses(422, 500)})
        def get_openapi() -> Response[str]:
            from agent_runtime.api.openapi import openapi_text  # noqa: PLC0415 - builds routes

            return Response(status_code=200, content_type=JSON, body=openapi_text())

    def _register_runs(self) -> None:
        @self._route("POST", "/runs", operation_id="createRun", summary="Start a run",
                     responses={**_responses(201, RunEnvelope, "The run was created", 409, 429,
                                             body=True),
                                200: {"description": "A repeat of an earlier request with the "
                                                     "same Idempotency-Key: its run",
                                      "content": {JSON: {"model": RunEnvelope}}}},
                     description="Stores a run of the agent manifest (status `created`) and "
                                 "starts it. With an `Idempotency-Key`, a repeat of the same "
                                 "request returns the same run (200) and a different request "
                                 "with that key is 409.")
        def create_run(
                body: Annotated[CreateRunRequest, Body()],
                idempotency_key: Annotated[str | None, Header(
                    alias="Idempotency-Key", pattern=IDEMPOTENCY_KEY_PATTERN,
                    description="Makes retries safe: the run id derives from (tenant, key)")]
                = None) -> Response[str]:
            return self.create_run(body, idempotency_key)

        @self._route("GET", "/runs", operation_id="listRuns", summary="List runs, newest first",
                     responses=_responses(200, RunList, "A page of runs"))
        def list_runs(status: Annotated[RunStatus | None, Query()] = None,
                      parent: Annotated[str | None, Query(
                          pattern=RUN_ID_PATTERN, description="Only this run's sub-runs")]
                      = None,
                      limit: Limit = 50, cursor: Cursor = None) -> Response[str]:
            return self.list_runs(status, parent, limit, cursor)

        @self._route("GET", "/runs/<runId>", operation_id="getRun", summary="A run",
                     responses=_responses(200, RunEnvelope, "The run"),
                     description="An output whose JSON text is large is not shown here: "
                                 "`outputRef` names it (GET /runs/{runId}/output).")
        def get_run(runId: RunId) -> Response[str]:
            return self.run_response(200, self.visible_run(runId))

        @self._route("GET", "/runs/<runId>/output", operation_id="getRunOutput",
                     summary="A run's output, whatever its size: whole, or in parts",
                     responses=_responses(200, RunOutput, "The run's output, or one part "
                                                          "of it"),
                     description="Where a run's `outputRef` points: the output a run view "
                                 "leaves out when it is large. Null until the run completes. "
                                 "An output too large for one answer is answered by "
                                 "reference: `output` null, `outputBytes`, and `next`, the "
                                 "path of its first part. Each part (`?offset=&length=`) "
                                 "holds `data`, base64 of the output's JSON text from "
                                 "`offset`, and `next` names the part after it; the parts "
                                 "together are the output's JSON text.")
        def get_run_output(runId: RunId, offset: Annotated[int | None, Query(
                               ge=0, le=MAX_OUTPUT_OFFSET,
                               description="Answer the part of the output's JSON text that "
                                           "starts at this byte")] = None,
                           length: Annotated[int | None, Query(
                               ge=1, le=MAX_OUTPUT_OFFSET,
                               description="At most this many bytes of it (the server may "
                                           "send fewer)")] = None) -> Response[str]:
            return Response(status_code=200, content_type=JSON, body=output_answer(
                self.visible_run(runId),
                max_answer_bytes=self.services.limits.max_output_answer_bytes,
                offset=offset, length=length))

    def _register_history(self) -> None:
        @self._route("GET", "/runs/<runId>/checkpoints", operation_id="listCheckpoints",
                     summary="A run's step timeline: its checkpoints, oldest first",
                     responses=_responses(200, CheckpointList, "A page of checkpoints"))
        def list_checkpoints(runId: RunId, limit: Limit = 50,
                             cursor: Cursor = None) -> Response[str]:
            return self.list_checkpoints(runId, limit, cursor)

        @self._route("GET", "/runs/<runId>/checkpoints/<seq>", operation_id="getCheckpoint",
                     summary="One checkpoint's state: variables, step results, cursor, budget",
                     responses=_responses(200, CheckpointEnvelope, "The checkpoint"))
        def get_checkpoint(runId: RunId,
                           seq: Annotated[int, Path(ge=1, le=MAX_TOKENS)]) -> Response[str]:
            record = self.visible_run(runId)
            checkpoint = self.services.store.load_checkpoint(record.run_id, seq)
            if checkpoint is None:
                raise ApiProblem(404, f"run {record.run_id} has no checkpoint {seq}",
                                 field="seq")
            return json_response(200, checkpoint_state(checkpoint))

        @self._route("GET", "/runs/<runId>/events", operation_id="listEvents",
                     summary="A run's lifecycle events after a cursor, long-polled",
                     responses=_responses(200, EventPage, "A page of the run's event log"),
                     description="The run's durable event log (steps, model and tool calls, "
                                 "approvals, checkpoints, the run's end; ids, timings and "
                                 "counts, never prompts, outputs, variables or tool "
                                 "arguments), oldest first, after the cursor `after`. With "
                                 "`wait`, an empty page waits up to that many seconds (the "
                                 "host caps it, 20 by default) for the next event. Follow a "
                                 "run by asking again with the page's `cursor`, until its "
                                 "`status` is terminal and a page is empty. `serve` also "
                                 "answers `Accept: text/event-stream` (Server-Sent Events, "
                                 "`id` the cursor, resumed from `Last-Event-ID`).")
        def list_events(runId: RunId,
                        after: Annotated[int, Query(ge=0, le=MAX_TOKENS, description=(
                            "The cursor of the last event seen (0: from the start)"))] = 0,
                        limit: Limit = 100,
                        wait: Annotated[int, Query(ge=0, le=MAX_WAIT, description=(
                            "Seconds to wait for an event when there is none yet"))] = 0,
                        ) -> Response[str]:
            record = self.visible_run(runId)
            limits = self.services.limits
            return json_response(200, wait_for_events(
                self.services.store, record, after=after,
                limit=min(limit, limits.max_page_size),
                wait=min(wait, limits.max_events_wait_seconds),
                poll=limits.events_poll_seconds))

        @self._route("GET", "/runs/<runId>/effects", operation_id="listEffects",
                     summary="A run's tool-call effects",
                     responses=_responses(200, EffectList, "The run's effects, oldest first"))
        def list_effects(runId: RunId) -> Response[str]:
            record = self.visible_run(runId)
            store = self.services.store
            return json_response(200, effect_list(store.list_effects(record.run_id), record,
                                                  effect_owners(store, record)))

    def _register_actions(self) -> None:
        @self._route("POST", "/runs/<runId>/approvals/<approvalId>", operation_id="answerApproval",
                     summary="Approve or reject what the run waits for, and resume it",
                     responses=_responses(200, RunEnvelope, "The answer was recorded", 409,
                                          429, body=True))
        def answer_approval(runId: RunId,
                            approvalId: Annotated[str, Path(pattern=KEY_PATTERN)],
                            body: Annotated[ApprovalRequest, Body()]) -> Response[str]:
            return self.answer_approval(runId, approvalId, body)

        @self._route("POST", "/runs/<runId>/resume", operation_id="resumeRun",
                     summary="Continue a suspended run (optionally with a new token limit)",
                     responses=_responses(200, RunEnvelope, "The run, handed to an executor "
                                          "(or already completed)", 409, 429, body=True))
        def resume_run(runId: RunId,
                       body: Annotated[ResumeRequest | None, Body()] = None) -> Response[str]:
            return self.resume_run(runId, body or ResumeRequest())

        @self._route("POST", "/runs/resume-crash-looped", operation_id="resumeCrashLooped",
                     summary="Resume the caller's runs suspended as crash-loop (after a fix)",
                     responses=_responses(200, CrashLoopResumes, "The runs resumed"),
                     description="Reads the caller's next `limit` suspended runs and resumes "
                                 "those the reconciler suspended because their owners kept "
                                 "dying (reason `crash-loop`), each with its takeover count "
                                 "started again. Call again with `cursor` until it is null. "
                                 "Each resume is recorded first: one the server has no room "
                                 "for now is resumed by its reconciler later.")
        def resume_crash_looped(limit: Limit = 100, cursor: Cursor = None) -> Response[str]:
            page = crash_looped_page(self.services.store, tenant=self.tenant(),
                                     cursor=decode_cursor(cursor), limit=limit)
            for run in page.runs:
                self.services.launcher.resume(run, reason="resume-requested")
            return json_response(200, CrashLoopResumes(
                resumed=[run.run_id for run in page.runs], cursor=encode_cursor(page.cursor)))

        @self._route("POST", "/runs/<runId>/cancel", operation_id="cancelRun",
                     summary="Cancel a run",
                     responses=_responses(200, RunEnvelope, "The run, cancelled", 409))
        def cancel_run(runId: RunId) -> Response[str]:
            record = self.visible_run(runId)
            self.services.runtime.cancel(record.run_id)
            return self.run_response(200, self.reload(record.run_id))

        @self._route("POST", "/runs/<runId>/fork", operation_id="forkRun",
                     summary="Start a new run from a checkpoint of this one",
                     responses=_responses(201, RunEnvelope, "The new run", 409, 429, body=True))
        def fork_run(runId: RunId,
                     body: Annotated[ForkRequest | None, Body()] = None) -> Response[str]:
            record = self.visible_run(runId)
            services = self.services
            self.check_quota()
            asked = body or ForkRequest()
            with self.place_for_a_run():
                fork = services.runtime.create_fork(
                    record.run_id, seq=asked.seq, tenant=record.tenant, variables=asked.variables,
                    budget=None if asked.max_total_tokens is None
                    else Budget(max_total_tokens=asked.max_total_tokens))
                services.launcher.start(fork)
            return self.run_response(201, self.reload(fork.run_id),
                                     headers={"Location": f"/runs/{fork.run_id}"})

        @self._route("POST", "/runs/<runId>/effects/<key>", operation_id="settleEffect",
                     summary="Settle a tool call whose outcome is unknown, and resume the run",
                     responses=_responses(200, RunEnvelope, "The settlement was recorded", 409,
                                          429, body=True))
        def settle_effect(runId: RunId,
                          key: Annotated[str, Path(pattern=KEY_PATTERN)],
                          body: Annotated[SettleEffectRequest, Body()]) -> Response[str]:
            return self.settle_effect(runId, key, body)

    def _register_console(self) -> None:
        # The web console's files: public (the page asks for the token), not
        # part of the API's OpenAPI document, with the console's own CSP.
        def page(path: str) -> Response[str]:
            found = console_page(path)
            if found is None:
                raise ApiProblem(404, f"the console has no file {excerpt(path)!r}")
            return Response(status_code=200, content_type=found.content_type, body=found.body,
                            headers=dict(CONSOLE_HEADERS))

        options: dict[str, Any] = {"public": True, "include_in_schema": False}

        @self._route("GET", "/", **options)
        def console_index() -> Response[str]:
            return page("/")

        @self._route("GET", "/console/<asset>", **options)
        def console_asset(asset: str) -> Response[str]:
            return page(f"/console/{asset}")

        @self._route("GET", "/console/examples/<name>", **options)
        def console_example(name: str) -> Response[str]:
            return page(f"/console/examples/{name}")

    def _register_caller(self) -> None:
        @self._route("GET", "/whoami", operation_id="whoAmI",
                     summary="The caller's tenant, as its credentials name it",
                     description="What the web console shows, so a person sees whose runs "
                                 "they act on. Needs the same credentials as every route.",
                     responses=_responses(200, Caller, "The caller"))
        def who_am_i() -> Response[str]:
            return json_response(200, Caller(tenant=self.tenant()))

    # -- what the routes do ----------------------------------------------------------

    def check_quota(self) -> None:
        """429 when the caller's tenant may not start another run now (tenant_quota)."""
        runtime = self.services.runtime
        check_quota(self.services.store, runtime.policy, self.tenant(), runtime.clock.now())

    def create_run(self, body: CreateRunRequest, key: str | None) -> Response[str]:
        services, tenant = self.services, self.tenant()
        fingerprint = request_fingerprint(self.router.current_event.json_body)
        keyed = None if key is None else run_key(tenant, key)
        if keyed is not None:
            earlier_id = services.store.find_run_key(keyed)
            earlier = None if earlier_id is None else services.store.load_run(earlier_id)
            if earlier is not None:
                return self._repeat(earlier, tenant, fingerprint)
        self.check_quota()
        with use_limits(services.runtime.config.limits):  # the host's input limits
            agent = agent_from_request(body.manifest)
        options: dict[str, Any] = {}
        if body.options is not None and body.options.model is not None:
            options["model"] = body.options.model
        limit = None if body.budget is None else body.budget.max_total_tokens
        record, _ = services.runtime.new_run(
            manifest=agent, variables=body.variables,
            budget=None if limit is None else Budget(max_total_tokens=limit),
            options=options, tenant=tenant, variables_source="request")
        record.options[REQUEST_SHA256] = fingerprint
        record.run_key = keyed
        # The caller's trace, continued by the run's spans (docs/telemetry.md); an
        # invalid header is ignored, as W3C Trace Context says.
        headers = self.router.current_event.headers or {}
        caller = parse_traceparent(next((value for name, value in headers.items()
                                         if name.lower() == "traceparent"), None))
        if caller is not None:
            record.options[TRACE_PARENT] = caller
        with self.place_for_a_run():
            try:
                services.store.create_run(record)
            except RunKeyTaken as taken:
                # A concurrent repeat won the race: answer as a repeat.
                return self._repeat(self.reload(taken.run_id), tenant, fingerprint)
            services.launcher.start(record)
        return self.run_response(201, self.reload(record.run_id),
                                 headers={"Location": f"/runs/{record.run_id}"})

    def _repeat(self, earlier: RunRecord, tenant: str, fingerprint: str) -> Response[str]:
        if earlier.tenant != tenant or earlier.options.get(REQUEST_SHA256) != fingerprint:
            raise ApiProblem(409, "this Idempotency-Key was used for a different request",
                             field="Idempotency-Key")
        return self.run_response(200, earlier, headers={"Location": f"/runs/{earlier.run_id}"})

    def list_runs(self, status: RunStatus | None, parent: str | None, limit: int,
                  cursor: str | None) -> Response[str]:
        """A page of the caller's runs, newest first: at most `limit` (and
        `max_page_size`) runs, ending early before the run that would take the
        page's JSON past `max_page_bytes`."""
        services = self.services
        limits = services.limits
        page = services.store.list_runs(
            statuses=None if status is None else [status], parent_run_id=parent,
            tenant=self.tenant(), newest_first=True,
            limit=min(limit, limits.max_page_size), cursor=decode_cursor(cursor))
        views = run_page(page.runs, max_output_bytes=limits.max_inline_output_bytes,
                         max_page_bytes=limits.max_page_bytes)
        # A store's cursor is the last run id it returned, and a run id continues a
        # listing after that run (the store contract's conformance suite holds
        # every backend to it), so a page cut short continues after its last run.
        more = page.cursor if len(views) == len(page.runs) else views[-1].run_id
        return json_response(200, RunList(runs=views, cursor=encode_cursor(more)))

    def list_checkpoints(self, run_id: str, limit: int, cursor: str | None) -> Response[str]:
        record = self.visible_run(run_id)
        store = self.services.store
        after_text = decode_cursor(cursor) or "0"
        if not after_text.isdigit():
            raise ApiProblem(422, "not a cursor this API returned", field="cursor")
        after = int(after_text)
        infos = [info for info in store.list_checkpoints(record.run_id) if info.seq > after]
        size = min(limit, self.services.limits.max_page_size)
        page, more = infos[:size], len(infos) > size
        # The page and the checkpoint before it (its step results count), in one read.
        loaded = {} if not page else {checkpoint.seq: checkpoint for checkpoint in
                                      store.load_checkpoints(record.run_id, page[0].seq - 1,
                                                             page[-1].seq)}
        previous = loaded.get(page[0].seq - 1) if page else None
        results = 0 if previous is None else len(previous.step_results)
        summaries = []
        for info in page:
            checkpoint = loaded.get(info.seq)
            summaries.append(checkpoint_summary(info, checkpoint, record.manifest, results))
            if checkpoint is not None:
                results = len(checkpoint.step_results)
        return json_response(200, CheckpointList(
            checkpoints=summaries,
            cursor=encode_cursor(str(page[-1].seq)) if more and page else None))

    def answer_approval(self, run_id: str, approval_id: str,
                        body: ApprovalRequest) -> Response[str]:
        record = self.visible_run(run_id)
        suspension = record.suspension
        if (record.status is not RunStatus.SUSPENDED or suspension is None
                or suspension.reason != "approval"
                or suspension.details.get("approval_id") != approval_id):
            raise ApiProblem(409, f"run {record.run_id} is not waiting for approval "
                                  f"{approval_id} ({_state_of(record)})")
        with self.place_for_a_run():
            self.services.runtime.approve(record.run_id, approved=body.approved,
                                          response=body.response, responded_by=self.tenant(),
                                          approval_id=approval_id)
            self.services.launcher.resume(self.reload(record.run_id),
                                          reason="approval-recorded")
        return self.run_response(200, self.reload(record.run_id))

    def resume_run(self, run_id: str, body: ResumeRequest) -> Response[str]:
        record = self.visible_run(run_id)
        services = self.services
        limit = body.max_total_tokens
        if limit is not None:
            # Refused here, not by the attempt the launcher starts later elsewhere.
            services.runtime.check_budget(Budget(max_total_tokens=limit),
                                          field="maxTotalTokens")
        if record.status is RunStatus.SUSPENDED:
            with self.place_for_a_run():
                services.launcher.resume(record, reason="resume-requested",
                                         budget=None if limit is None
                                         else Budget(max_total_tokens=limit))
        elif record.status is RunStatus.CREATED:
            if limit is not None:
                raise ApiProblem(409, f"run {record.run_id} has not started yet, so it keeps "
                                      "the budget it was created with", field="maxTotalTokens")
            with self.place_for_a_run():
                services.launcher.start(record)
        elif record.status is RunStatus.RUNNING:
            raise ApiProblem(409, f"run {record.run_id} is running already")
        elif record.status is RunStatus.FAILED:
            raise ApiProblem(409, f"run {record.run_id} failed; a failed run is not resumed: "
                                  "fork it (POST /runs/{runId}/fork) to retry from a checkpoint")
        elif record.status is RunStatus.CANCELLED:
            raise ApiProblem(409, f"run {record.run_id} was cancelled; fork it to continue "
                                  "from a checkpoint")
        # completed: nothing to do, the run is its own answer.
        return self.run_response(200, self.reload(record.run_id))

    def settle_effect(self, run_id: str, key: str, body: SettleEffectRequest) -> Response[str]:
        record = self.visible_run(run_id)
        suspension = record.suspension
        if (record.status is not RunStatus.SUSPENDED or suspension is None
                or suspension.reason != "effect-unknown"
                or suspension.details.get("key") != key):
            raise ApiProblem(409, f"run {record.run_id} is not waiting on effect {key} "
                                  f"({_state_of(record)})")
        given = body.model_fields_set
        if body.action == "result" and "result" not in given:
            raise ApiProblem(422, "action `result` needs the call's `result`", field="result")
        if body.action != "result" and "result" in given:
            raise ApiProblem(422, f"action `{body.action}` takes no `result`", field="result")
        settlement: dict[str, Any] = {"action": body.action}
        if body.action == "result":
            settlement["result"] = body.result
        services = self.services
        with self.place_for_a_run():
            services.store.resolve_approval(record.run_id, key, approved=True,
                                            response=settlement, responded_by=self.tenant(),
                                            at=services.runtime.clock.now())
            services.launcher.resume(self.reload(record.run_id), reason="effect-settled")
        return self.run_response(200, self.reload(record.run_id))


def _state_of(record: RunRecord) -> str:
    if record.status is RunStatus.SUSPENDED and record.suspension is not None:
        return f"it is suspended for {record.suspension.reason}"
    return f"it is {record.status.value}"


def build_api(resolver: ApiGatewayResolver, services: ApiServices) -> None:
    """Register every route (one `Router`), the problem+json error mapping and
    GET /openapi.json on `resolver`, created by the caller with `enable_validation=True`
    (`HttpResolverLocal` locally, `APIGatewayHttpResolver` on AWS)."""
    include_routes(resolver, services)


def include_routes(resolver: ApiGatewayResolver, services: ApiServices | None) -> RunRoutes:
    """`build_api`; with `services=None` only to describe the routes (`openapi_document`)."""
    routes = RunRoutes(services)
    resolver.include_router(routes.router)
    guard.install(resolver, guard.RequestGuard(lambda: routes.services, routes.protected))
    register_problem_handlers(resolver, routes.allowed_methods)
    return routes
