"""What the HTTP API's run routes do: start a run (idempotently), answer an
approval, resume a run, settle an unknown effect. `RunRoutes` registers them.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from stores.base import RunKeyTaken
from stores.records import Budget, RunRecord, RunStatus

from agent_runtime.api.problems import ApiProblem
from agent_runtime.api.route_context import RouteContext
from agent_runtime.api.wire import (
    ApprovalRequest,
    CreateRunRequest,
    ResumeRequest,
    SettleEffectRequest,
)
from agent_runtime.limits import use_limits
from agent_runtime.run_ids import run_key
from agent_runtime.run_options import REQUEST_SHA256
from agent_runtime.telemetry.trace_ids import TRACE_PARENT, parse_traceparent


class RunActions(RouteContext):
    """The run routes' work, on the context every route has."""

    def create_run(self, body: CreateRunRequest, key: str | None) -> Response[str]:
        # The manifest's reader and models load with the first run created: the routes
        # that only read runs (most requests) never need them.
        from agent_runtime.api.submission import (  # noqa: PLC0415
            agent_from_request,
            request_fingerprint,
        )

        services, tenant = self.services, self.tenant()
        fingerprint = request_fingerprint(self.router.current_event.json_body)
        keyed = None if key is None else run_key(tenant, key)
        if keyed is not None:
            earlier_id = services.store.find_run_key(keyed)
            earlier = None if earlier_id is None else services.store.load_run(earlier_id)
            if earlier is not None:
                return self._repeat(earlier, tenant, fingerprint)
        self.check_quota()
        with use_limits(services.engine().config.limits):  # the host's input limits
            agent = agent_from_request(body.manifest)
        options: dict[str, Any] = {}
        if body.options is not None and body.options.model is not None:
            options["model"] = body.options.model
        limit = None if body.budget is None else body.budget.max_total_tokens
        record, _ = services.engine().new_run(
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

    def _waiting(self, run_id: str, reason: str, detail: str, value: str,
                 what: str) -> RunRecord:
        """The caller's run, suspended for `reason` on the `detail` named `value`; else 409
        saying what the run is doing instead."""
        record = self.visible_run(run_id)
        suspension = record.suspension
        if (record.status is not RunStatus.SUSPENDED or suspension is None
                or suspension.reason != reason or suspension.details.get(detail) != value):
            raise ApiProblem(409, f"run {record.run_id} is not waiting {what} "
                                  f"({_state_of(record)})")
        return record

    def answer_approval(self, run_id: str, approval_id: str,
                        body: ApprovalRequest) -> Response[str]:
        record = self._waiting(run_id, "approval", "approval_id", approval_id,
                               f"for approval {approval_id}")
        with self.place_for_a_run():
            self.services.engine().approve(record.run_id, approved=body.approved,
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
            services.engine().check_budget(Budget(max_total_tokens=limit),
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
        record = self._waiting(run_id, "effect-unknown", "key", key, f"on effect {key}")
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
                                            at=services.engine().clock.now())
            services.launcher.resume(self.reload(record.run_id), reason="effect-settled")
        return self.run_response(200, self.reload(record.run_id))


def _state_of(record: RunRecord) -> str:
    if record.status is RunStatus.SUSPENDED and record.suspension is not None:
        return f"it is suspended for {record.suspension.reason}"
    return f"it is {record.status.value}"
