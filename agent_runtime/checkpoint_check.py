"""Is a loaded checkpoint one this run can continue from?

A store checks its own bytes (checksums, decoding). This checks what only the
engine can: that the checkpoint belongs to the run, was written by one of its
attempts, and that its cursor points into the manifest the run executes. It
runs before an attempt is reserved, so a damaged or misplaced checkpoint is
reported and nothing executes from it.
"""

from __future__ import annotations

from collections.abc import Sequence

from stores.base import CorruptRecord
from stores.records import Checkpoint, Frame, RunRecord

from agent_runtime.continuations import check_versions
from agent_runtime.errors import AgentRuntimeError
from agent_runtime.manifest import AgentManifest
from agent_runtime.step_kinds import Step


class CorruptCheckpoint(AgentRuntimeError, CorruptRecord):
    """A checkpoint that cannot be this run's: a `CorruptRecord` (the store holds it)
    and an `AgentRuntimeError` (the engine found it)."""


def check_checkpoint(record: RunRecord, checkpoint: Checkpoint | None,
                     manifest: AgentManifest) -> None:
    """Raise `CorruptCheckpoint` naming the run and seq when `checkpoint` cannot be
    `record`'s latest: another run's, an attempt after the run's, or a cursor that
    points past the manifest's steps; `CheckpointVersionRefused` when this release
    cannot read its format or a frame's continuation (agent_runtime/continuations.py)."""
    if checkpoint is None:
        return
    where = f"run {record.run_id}: checkpoint {checkpoint.seq}"
    if checkpoint.run_id != record.run_id:
        raise CorruptCheckpoint(f"{where} belongs to run {checkpoint.run_id!r}")
    if checkpoint.attempt > record.attempt:
        raise CorruptCheckpoint(f"{where} was written by attempt {checkpoint.attempt}, "
                                f"after the run's latest attempt {record.attempt}")
    if record.checkpoint_seq is not None and checkpoint.seq > record.checkpoint_seq:
        raise CorruptCheckpoint(f"{where} is past the run's latest checkpoint "
                                f"{record.checkpoint_seq}")
    problem = cursor_problem(checkpoint.cursor, manifest.steps)
    if problem is not None:
        raise CorruptCheckpoint(f"{where}: {problem}")
    check_versions(checkpoint, manifest.steps, where)


def cursor_problem(cursor: Sequence[Frame], steps: Sequence[Step]) -> str | None:
    """Why `cursor` cannot point into `steps`, or None. Each frame below the top
    indexes the child steps of the loop its parent frame is at."""
    level: Sequence[Step] | None = steps
    for depth, frame in enumerate(cursor):
        if level is None:
            return f"cursor frame {depth} is below a step that has no child steps"
        if frame.step_index < 0 or frame.step_index > len(level):
            return (f"cursor frame {depth} is at step index {frame.step_index}, "
                    f"and that level has {len(level)} steps")
        if frame.step_index == len(level):
            if depth != len(cursor) - 1:
                return f"cursor frame {depth} is past its last step and has frames below it"
            return None
        step = level[frame.step_index]
        if frame.step_id != step.id:
            return (f"cursor frame {depth} names step {frame.step_id!r}, and the step at "
                    f"index {frame.step_index} is {step.id!r}")
        level = step.child_steps() or None
    return None


class ForkSourceMissing(AgentRuntimeError):
    """A forked run's first attempt found no checkpoint to start from."""


def unstartable(error: Exception) -> tuple[str, str]:
    """The recorded error (type, message) of an attempt that cannot begin."""
    return ("corrupt_record" if isinstance(error, CorruptRecord) else "fork_source_missing",
            str(error))
