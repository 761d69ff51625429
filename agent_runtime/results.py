"""RunResult: what one execution of a run (a start, a resume, an advance) ended with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stores.records import RunStatus


@dataclass
class RunResult:
    """The run's state when the execution stopped: finished, suspended, or (for
    `advance` at its deadline) still running. `usage` counts tokens so far."""

    run_id: str
    status: RunStatus
    attempt: int
    output: Any = None
    suspension: dict[str, Any] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    error: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        body = {"run_id": self.run_id, "status": self.status.value, "attempt": self.attempt,
                "output": self.output, "suspension": self.suspension, "usage": self.usage}
        if self.error is not None:
            body["error"] = self.error
        return body
