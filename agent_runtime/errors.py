"""Errors of the engine, and the control-flow signals user code must not swallow."""

from __future__ import annotations

from typing import Any


class AgentRuntimeError(Exception):
    """Base of the engine's errors."""


class InvalidInput(AgentRuntimeError):
    """Bad input from a user: a manifest, a variable, a flag. The CLI exits 2.

    The message names where (`source`: a file or "--variables"), what
    (`field`: a dotted/indexed path such as `steps[1].outputVariable`) and why.
    """

    def __init__(self, reason: str, *, source: str | None = None, field: str | None = None) -> None:
        self.reason = reason
        self.source = source
        self.field = field
        super().__init__(self.render())

    def render(self) -> str:
        where = ": ".join(part for part in (self.source, self.field) if part)
        return f"{where}: {self.reason}" if where else self.reason


class NotFound(InvalidInput):
    """Input names something that does not exist: a file to read, a store, a run.

    The CLI exits 3 (an `InvalidInput` otherwise, so callers catching that
    still catch this).
    """


class Conflict(InvalidInput):
    """Well-formed input the run's state refuses: a run id already taken. The CLI exits 4."""


class ManifestError(InvalidInput):
    """An agent or run manifest is malformed or breaks a schema rule."""


class ManifestNotFound(ManifestError, NotFound):
    """A manifest file that does not exist."""


class VariableError(InvalidInput):
    """A run variable override breaks the declaration rules."""


class VariablesNotFound(VariableError, NotFound):
    """A `--variables @file` that does not exist."""


class ConfigError(InvalidInput):
    """The runtime config or a runtime option is invalid."""


class ConfigNotFound(ConfigError, NotFound):
    """A runtime config file that does not exist."""


class ManifestMismatch(InvalidInput):
    """Resuming with a manifest whose hash differs from the run's."""


class ConditionSyntaxError(InvalidInput):
    """A `when`, `condition` or `goal` expression does not parse."""

    def __init__(self, reason: str, *, expression: str, position: int,
                 source: str | None = None, field: str | None = None) -> None:
        self.expression = expression
        self.position = position
        super().__init__(reason, source=source, field=field)


class ConditionEvaluationError(AgentRuntimeError):
    """A condition parsed but could not be evaluated (for example a bad operand type)."""


class StepFailed(AgentRuntimeError):
    """A step failed; the run fails with this error code, message and details."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}


class CheckpointUnavailable(AgentRuntimeError):
    """The store could not save a checkpoint (or a run's final write) for a reason other
    than lost ownership: a full disk, a dropped connection, a broken store.

    The run cannot go on without its commit point, so it fails as
    `checkpoint_unavailable`; no later step runs.
    """

    def __init__(self, run_id: str, cause: BaseException) -> None:
        self.run_id = run_id
        self.cause = cause
        super().__init__(f"run {run_id}: checkpoint unavailable: {type(cause).__name__}: {cause}")


class RunSignal(BaseException):
    """Control flow that user tool code must not swallow with `except Exception`."""


class SuspendRun(RunSignal):
    """Suspend the run for `reason` (approval, sub-run, token-budget, effect-unknown,
    interrupted)."""

    def __init__(self, reason: str, details: dict[str, Any]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.details = details


class EndRun(RunSignal):
    """End the run early: `complete` with the outputs so far, or `cancel`."""

    def __init__(self, action: str, reason: str) -> None:
        super().__init__(action)
        self.action = action
        self.reason = reason


class DeadlineReached(RunSignal):
    """`advance` reached its deadline at a commit point; the run stays running."""
