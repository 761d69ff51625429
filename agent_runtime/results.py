"""RunResult: what one execution of a run (a start, a resume, an advance) ended with."""

from __future__ import annotations

from dataclasses import dataclass, field

from stores.records import JsonObject, JsonValue, RunRecord, RunStatus


@dataclass
class RunResult:
    """The run's state when the execution stopped: finished, suspended, or (for
    `advance` at its deadline) still running. `usage` counts tokens so far."""

    run_id: str
    status: RunStatus
    attempt: int
    output: JsonValue = None
    suspension: JsonObject | None = None
    usage: dict[str, int] = field(default_factory=dict)
    error: JsonObject | None = None
    # False when the call found the run not running and executed nothing:
    # the result is what the run's record holds.
    executed: bool = True

    def to_json(self) -> JsonObject:
        body = {"run_id": self.run_id, "status": self.status.value, "attempt": self.attempt,
                "output": self.output, "suspension": self.suspension, "usage": self.usage}
        if self.error is not None:
            body["error"] = self.error
        return body


TERMINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


def finished_result(record: RunRecord) -> RunResult:
    """The result a run's record holds: what resuming a run that is not running
    (finished, or suspended) answers, instead of a store error."""
    return RunResult(run_id=record.run_id, status=record.status, attempt=record.attempt,
                     output=record.output,
                     suspension=None if record.suspension is None
                     or record.status is not RunStatus.SUSPENDED
                     else record.suspension.model_dump(mode="json"),
                     error=None if record.error is None else record.error.model_dump(mode="json"),
                     executed=False)
