"""What a reconciliation pass reports, and the seam through which it resumes a run.

The reasons a pass gives (`owner-alive`, `lost-race`, ...), its outcome per run
(`RunOutcome`) and per pass (`ReconcileSummary`), and the `ResumeAction` an
executor provides (the AWS reconciler starts an execution) with the errors
that mean someone else got there first. `agent_runtime.reconcile` re-exports
them all; the start function shares them without loading the reconciler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from stores import transitions
from stores.base import InvalidTransition, LeaseHeld, RunTerminal, StaleAttempt
from stores.records import RunRecord, RunStatus

OWNER_ALIVE = "owner-alive"
OWNER_UNKNOWN = "owner-unknown"
LOST_RACE = "lost-race"
NO_ROOM = "no-room"
# Why a suspended run is resumed.
RESUME_REQUESTED = "resume-requested"
CHILD_FINISHED = "child-finished"
SUB_RUN = "sub-run"
# Why the reconciler suspended a run: its owners kept dying (stores.transitions.CRASH_LOOP).
CRASH_LOOP = transitions.CRASH_LOOP


class LostRace(Exception):
    """Raised by a resume action that finds another reconciler or executor got there first."""


class NoRoom(Exception):
    """Raised by a resume action whose executor has no place for the run now: not an
    error, the run is skipped and a later pass tries again."""


# Another reconciler (or a user's `resume`) got there first: the run moved on.
RACE_ERRORS = (LeaseHeld, RunTerminal, InvalidTransition, StaleAttempt, LostRace)


# -- outcomes ------------------------------------------------------------------


class Action(StrEnum):
    RESUMED = "resumed"
    SKIPPED = "skipped"
    SUSPENDED_RUN = "suspended-run"  # a crash loop: suspended for an operator
    ERROR = "error"


@dataclass(frozen=True)
class RunOutcome:
    """What a pass did with one candidate run.

    `attempt` is the attempt that ran (resumed) or that the decision was
    about; `status` the run's status afterwards, when known.
    """

    run_id: str
    action: Action
    attempt: int
    reason: str | None = None
    detail: str | None = None
    status: RunStatus | None = None
    takeovers: int | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"run_id": self.run_id, "action": self.action.value,
                                "attempt": self.attempt}
        for name in ("reason", "detail", "status", "takeovers"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value.value if isinstance(value, StrEnum) else value
        return body


@dataclass
class ReconcileSummary:
    """What a pass did: an outcome per run it acted on. `deferred` says why it left
    further resumes and starts to a later pass (no room), when it did."""

    reconcile_id: str
    outcomes: list[RunOutcome] = field(default_factory=list)
    deferred: str | None = None

    def count(self, action: Action) -> int:
        return sum(outcome.action is action for outcome in self.outcomes)

    @property
    def errors(self) -> int:
        return self.count(Action.ERROR)

    def counts(self) -> dict[str, int]:
        return {"candidates": len(self.outcomes), "resumed": self.count(Action.RESUMED),
                "skipped": self.count(Action.SKIPPED),
                "suspended_runs": self.count(Action.SUSPENDED_RUN), "errors": self.errors}

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"reconcile_id": self.reconcile_id, "counts": self.counts(),
                                "runs": [outcome.to_json() for outcome in self.outcomes]}
        if self.deferred is not None:
            body["deferred"] = self.deferred
        return body


# -- how a run is resumed ------------------------------------------------------


@dataclass(frozen=True)
class Resumed:
    """What a resume action did: the attempt it ran or started, and the run's status
    after it — None when the attempt goes on elsewhere (a started execution)."""

    attempt: int
    status: RunStatus | None = None
    detail: str | None = None


class ResumeAction(Protocol):
    async def __call__(self, run: RunRecord) -> Resumed:
        """Reserve a new attempt of `run` and continue it, or have an executor do so.

        `run` is `created`, `suspended` with a resume due, or `running` with an
        owner confirmed gone (take it over: `allow_running_takeover`). Raises
        one of `RACE_ERRORS` when someone else got there first; any other
        exception is reported as an error of this run and the pass goes on.
        """
        ...
