"""The HTTP API's routes: one Powertools `Router`, served on API Gateway and by `serve`.

    resolver = APIGatewayHttpResolver(enable_validation=True)   # or OneHopResolver (serve)
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

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from stores.records import Budget

from agent_runtime.api import guard, run_listing
from agent_runtime.api.event_wire import EventPage
from agent_runtime.api.manifest_check import register_manifest_routes
from agent_runtime.api.output_parts import output_answer
from agent_runtime.api.problems import (
    ApiProblem,
    excerpt,
    problem_schema_responses,
    register_problem_handlers,
)
from agent_runtime.api.route_context import (
    JSON,
    MAX_OUTPUT_OFFSET,
    MAX_WAIT,
    Cursor,
    Limit,
    RunId,
    decode_cursor,
    encode_cursor,
    json_response,
    route_responses,
)
from agent_runtime.api.run_actions import RunActions
from agent_runtime.api.run_events import wait_for_events
from agent_runtime.api.run_listing import (
    AgentParam,
    CreatedAfterParam,
    CreatedBeforeParam,
    IdPrefixParam,
    ParentParam,
    RunQuery,
    StatusParam,
    search_time,
)
from agent_runtime.api.services import ApiServices
from agent_runtime.api.wire import (
    IDEMPOTENCY_KEY_PATTERN,
    KEY_PATTERN,
    MAX_TOKENS,
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
)
from agent_runtime.console import CONSOLE_HEADERS, console_page
from agent_runtime.crash_loops import crash_looped_page
from agent_runtime.effect_owners import effect_owners


class RunRoutes(RunActions):
    """The routes, bound to the services they use (None only to describe them)."""

    def __init__(self, services: ApiServices | None) -> None:
        super().__init__(services)
        self._register()

    # -- the routes ----------------------------------------------------------------

    def _register(self) -> None:
        self._register_runs()
        self._register_history()
        self._register_actions()
        self._register_console()
        self._register_caller()
        register_manifest_routes(self)

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
                     responses={**route_responses(201, RunEnvelope, "The run was created", 409, 429,
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
                     responses=route_responses(200, RunList, "A page of runs"),
                     description="The caller's runs, newest first, that match every filter "
                                 "given: a status, a parent, an agent, an id prefix, a "
                                 "creation time range (`createdAfter` <= created < "
                                 "`createdBefore`). Answered from the store's indexes. Call "
                                 "again with `cursor` (and the same filters) for the next "
                                 "page; it is null on the last.")
        def list_runs(*, status: StatusParam = None, parent: ParentParam = None,
                      agent: AgentParam = None, idPrefix: IdPrefixParam = None,
                      createdAfter: CreatedAfterParam = None,
                      createdBefore: CreatedBeforeParam = None,
                      limit: Limit = 50, cursor: Cursor = None) -> Response[str]:
            query = RunQuery(status=status, parent=parent, agent=agent, id_prefix=idPrefix,
                             created_after=search_time(createdAfter, "createdAfter"),
                             created_before=search_time(createdBefore, "createdBefore"))
            return run_listing.list_runs(self.services, self.tenant(), query, limit, cursor)

        @self._route("GET", "/runs/<runId>", operation_id="getRun", summary="A run",
                     responses=route_responses(200, RunEnvelope, "The run"),
                     description="An output whose JSON text is large is not shown here: "
                                 "`outputRef` names it (GET /runs/{runId}/output).")
        def get_run(runId: RunId) -> Response[str]:
            return self.run_response(200, self.visible_run(runId))

        @self._route("GET", "/runs/<runId>/output", operation_id="getRunOutput",
                     summary="A run's output, whatever its size: whole, or in parts",
                     responses=route_responses(200, RunOutput, "The run's output, or one part "
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
                     responses=route_responses(200, CheckpointList, "A page of checkpoints"))
        def list_checkpoints(runId: RunId, limit: Limit = 50,
                             cursor: Cursor = None) -> Response[str]:
            return self.list_checkpoints(runId, limit, cursor)

        @self._route("GET", "/runs/<runId>/checkpoints/<seq>", operation_id="getCheckpoint",
                     summary="One checkpoint's state: variables, step results, cursor, budget",
                     responses=route_responses(200, CheckpointEnvelope, "The checkpoint"))
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
                     responses=route_responses(200, EventPage, "A page of the run's event log"),
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
                     responses=route_responses(200, EffectList, "The run's effects, oldest first"))
        def list_effects(runId: RunId) -> Response[str]:
            record = self.visible_run(runId)
            store = self.services.store
            return json_response(200, effect_list(store.list_effects(record.run_id), record,
                                                  effect_owners(store, record)))

    def _register_actions(self) -> None:
        @self._route("POST", "/runs/<runId>/approvals/<approvalId>", operation_id="answerApproval",
                     summary="Approve or reject what the run waits for, and resume it",
                     responses=route_responses(200, RunEnvelope, "The answer was recorded", 409,
                                               429, body=True))
        def answer_approval(runId: RunId,
                            approvalId: Annotated[str, Path(pattern=KEY_PATTERN)],
                            body: Annotated[ApprovalRequest, Body()]) -> Response[str]:
            return self.answer_approval(runId, approvalId, body)

        @self._route("POST", "/runs/<runId>/resume", operation_id="resumeRun",
                     summary="Continue a suspended run (optionally with a new token limit)",
                     responses=route_responses(200, RunEnvelope, "The run, handed to an executor "
                                               "(or already completed)", 409, 429, body=True))
        def resume_run(runId: RunId,
                       body: Annotated[ResumeRequest | None, Body()] = None) -> Response[str]:
            return self.resume_run(runId, body or ResumeRequest())

        @self._route("POST", "/runs/resume-crash-looped", operation_id="resumeCrashLooped",
                     summary="Resume the caller's runs suspended as crash-loop (after a fix)",
                     responses=route_responses(200, CrashLoopResumes, "The runs resumed"),
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
                     responses=route_responses(200, RunEnvelope, "The run, cancelled", 409))
        def cancel_run(runId: RunId) -> Response[str]:
            record = self.visible_run(runId)
            self.services.engine().cancel(record.run_id)
            return self.run_response(200, self.reload(record.run_id))

        @self._route("POST", "/runs/<runId>/fork", operation_id="forkRun",
                     summary="Start a new run from a checkpoint of this one",
                     responses=route_responses(201, RunEnvelope, "The new run", 409, 429,
                                               body=True))
        def fork_run(runId: RunId,
                     body: Annotated[ForkRequest | None, Body()] = None) -> Response[str]:
            record = self.visible_run(runId)
            services = self.services
            self.check_quota()
            asked = body or ForkRequest()
            with self.place_for_a_run():
                fork = services.engine().create_fork(
                    record.run_id, seq=asked.seq, tenant=record.tenant, variables=asked.variables,
                    budget=None if asked.max_total_tokens is None
                    else Budget(max_total_tokens=asked.max_total_tokens))
                services.launcher.start(fork)
            return self.run_response(201, self.reload(fork.run_id),
                                     headers={"Location": f"/runs/{fork.run_id}"})

        @self._route("POST", "/runs/<runId>/effects/<key>", operation_id="settleEffect",
                     summary="Settle a tool call whose outcome is unknown, and resume the run",
                     responses=route_responses(200, RunEnvelope, "The settlement was recorded", 409,
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
                     responses=route_responses(200, Caller, "The caller"))
        def who_am_i() -> Response[str]:
            return json_response(200, Caller(tenant=self.tenant()))

    # -- what the routes do ----------------------------------------------------------

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

def build_api(resolver: ApiGatewayResolver, services: ApiServices) -> None:
    """Register every route (one `Router`), the problem+json error mapping and
    GET /openapi.json on `resolver`, created by the caller with `enable_validation=True`
    (`one_hop_resolver.OneHopResolver` locally, `APIGatewayHttpResolver` on AWS). The
    routes and middlewares are synchronous."""
    include_routes(resolver, services)


def include_routes(resolver: ApiGatewayResolver,
                   services: ApiServices | None) -> RunRoutes:
    """`build_api`; with `services=None` only to describe the routes (`openapi_document`)."""
    routes = RunRoutes(services)
    resolver.include_router(routes.router)
    guard.install(resolver, guard.RequestGuard(lambda: routes.services, routes.protected))
    register_problem_handlers(resolver, routes.allowed_methods)
    return routes
