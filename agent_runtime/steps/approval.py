"""`approval` steps: suspend until a decision is recorded, then act on it.

The approval id is derived from the run and the step path, so each loop
iteration's approval is its own and the same approval keeps its id across
attempts. The store-backed adapter reads the decision `resolve_approval`
recorded on the run's suspension; once read, the step's output is saved and
the run never asks again.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Protocol

from stores.records import Frame, JsonObject, JsonValue, RunRecord

from agent_runtime.errors import EndRun, StepFailed, SuspendRun
from agent_runtime.manifest import ApprovalStep

if TYPE_CHECKING:
    from agent_runtime.execution import Execution


def approval_id_for(run_id: str, step_path: str) -> str:
    digest = hashlib.sha256(f"{run_id}\0{step_path}".encode()).hexdigest()
    return f"apr_{digest[:20]}"


class ApprovalAdapter(Protocol):
    def decision(self, run: RunRecord, approval_id: str) -> JsonObject | None:
        """The recorded answer (`approved`, `response`, `responded_at`), or None to suspend."""
        ...


class StoreApprovals:
    """Decisions recorded in the store with `resolve_approval`."""

    def decision(self, run: RunRecord, approval_id: str) -> JsonObject | None:
        suspension = run.suspension
        if (suspension is None or suspension.reason != "approval" or suspension.decision is None
                or suspension.details.get("approval_id") != approval_id):
            return None
        return suspension.decision


class ApprovalStepExecutor:
    async def execute(self, step: ApprovalStep, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        approval_id = frame.continuation.setdefault(
            "approval_id", approval_id_for(ctx.run_id, frame.step_path))
        decision = ctx.approval_decision(approval_id)
        if decision is None:
            # The event says only that an approval waits; the prompt and the step's
            # metadata (the approver's details) go to the suspension, which the
            # store keeps and the API and the CLI show.
            ctx.events.emit("approval.requested", step_id=step.id, step_path=frame.step_path,
                            approval_id=approval_id, action=step.action or "pause")
            details: JsonObject = {"approval_id": approval_id, "prompt": step.prompt,
                                       "step_path": frame.step_path, "step_id": step.id}
            if step.metadata is not None:
                details["details"] = step.metadata
            raise SuspendRun("approval", details)
        approved = bool(decision.get("approved"))
        ctx.events.emit("approval.resolved", step_id=step.id, step_path=frame.step_path,
                        approval_id=approval_id, approved=approved)
        output: JsonObject = {"approved": approved,
                                  "respondedAt": decision.get("responded_at")}
        if decision.get("response") is not None:
            output["response"] = decision["response"]
        if approved:
            return output
        action = step.action or "pause"
        if action == "cancel":
            raise EndRun("cancel", f"approval {frame.step_path} was rejected")
        if action == "complete":
            raise EndRun("complete", f"approval {frame.step_path} was rejected")
        raise StepFailed("approval_rejected", f"approval {frame.step_path} was rejected",
                         {"approval_id": approval_id})
