"""The versions a checkpoint carries, read on resume: refused when newer, migrated when older.

Two versions are written with every checkpoint and read back here:

* the body's format, `contract_version` ("major.minor", `CHECKPOINT_FORMAT`),
  next to the release that wrote it (`runtime_version`). A format newer than
  this release reads is refused by name before anything runs, so a run a newer
  worker left behind waits for a worker that can read it instead of failing.
  An older one is brought up one format at a time by `CHECKPOINT_MIGRATIONS`.
* each cursor frame's `continuation_version`: the shape of its step kind's
  continuation (`StepBase.continuation_version`). A newer one is refused the
  same way; an older one goes through the kind's `migrate_continuation`.

Format 1.1 added the run's event log (`Checkpoint.events`); a 1.0 checkpoint
has none, and its run's log starts with the attempt that resumes it. A release
that changes the body's shape bumps `CONTRACT_VERSION` and adds its step here, and
`tests/agent_runtime/test_checkpoint_formats.py` resumes the checkpoints the
previous release wrote (`tests/fixtures/checkpoints/`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from stores.records import CONTRACT_VERSION, Checkpoint, Frame

from agent_runtime.errors import Conflict
from agent_runtime.step_kinds import StepBase

# The newest body format this release reads (and the one it writes).
CHECKPOINT_FORMAT = CONTRACT_VERSION

CheckpointMigration = Callable[[Checkpoint], Checkpoint]
# From a format to the next one and how: {"1.0": ("1.1", bring_1_0_to_1_1)}.
CHECKPOINT_MIGRATIONS: dict[str, tuple[str, CheckpointMigration]] = {
    # 1.0 had no event log: read without one, it is an empty one.
    "1.0": ("1.1", lambda checkpoint: checkpoint),
}


class CheckpointVersionRefused(Conflict):
    """A checkpoint this release cannot resume from: written in a newer format or by a
    newer step kind, or in an older one nothing migrates. The run is left as it is."""


def _format(version: str, where: str) -> tuple[int, int]:
    major, dot, minor = version.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        raise CheckpointVersionRefused(f"{where}: format {version!r} is not a "
                                       "major.minor version")
    return int(major), int(minor)


def check_versions(checkpoint: Checkpoint, steps: Sequence[StepBase], where: str) -> None:
    """Raise `CheckpointVersionRefused` naming the run and seq (`where`) and what is
    newer or cannot be migrated; nothing when `migrated` can bring it up."""
    written = _format(checkpoint.contract_version, where)
    if written > _format(CHECKPOINT_FORMAT, where):
        raise CheckpointVersionRefused(
            f"{where} is in checkpoint format {checkpoint.contract_version}, written by "
            f"agent-runtime {checkpoint.runtime_version}; this release reads format "
            f"{CHECKPOINT_FORMAT} and older: resume it with that release or a later one")
    version = checkpoint.contract_version
    while _format(version, where) < _format(CHECKPOINT_FORMAT, where):
        if version not in CHECKPOINT_MIGRATIONS:
            raise CheckpointVersionRefused(
                f"{where} is in checkpoint format {version}, and nothing migrates it to "
                f"{CHECKPOINT_FORMAT}")
        version = CHECKPOINT_MIGRATIONS[version][0]
    for frame, step in _frames(checkpoint.cursor, steps):
        kind = type(step)
        if frame.continuation_version > kind.continuation_version:
            raise CheckpointVersionRefused(
                f"{where}: step {step.id!r} ({step.type}) saved continuation version "
                f"{frame.continuation_version}, written by agent-runtime "
                f"{checkpoint.runtime_version}; this release's {step.type} steps read "
                f"version {kind.continuation_version} and older")
        if frame.continuation_version < kind.continuation_version and not _migrates(kind):
            raise CheckpointVersionRefused(
                f"{where}: step {step.id!r} ({step.type}) saved continuation version "
                f"{frame.continuation_version}, and its kind (version "
                f"{kind.continuation_version}) has no migrate_continuation")


def _migrates(kind: type[StepBase]) -> bool:
    """Whether the kind (or a base below StepBase) overrides `migrate_continuation`."""
    return any("migrate_continuation" in vars(cls)
               for cls in kind.__mro__[:kind.__mro__.index(StepBase)])


def migrated(checkpoint: Checkpoint, steps: Sequence[StepBase], where: str) -> Checkpoint:
    """`checkpoint` in this release's format with every frame's continuation in its
    kind's current version (`check_versions` first: refused as it refuses)."""
    check_versions(checkpoint, steps, where)
    while checkpoint.contract_version != CHECKPOINT_FORMAT:
        target, bring_up = CHECKPOINT_MIGRATIONS[checkpoint.contract_version]
        checkpoint = bring_up(checkpoint).model_copy(update={"contract_version": target})
    stale = [(frame, step) for frame, step in _frames(checkpoint.cursor, steps)
             if frame.continuation_version < type(step).continuation_version]
    if not stale:
        return checkpoint
    renewed = {id(frame): frame.model_copy(update={
        "continuation": type(step).migrate_continuation(dict(frame.continuation),
                                                        frame.continuation_version),
        "continuation_version": type(step).continuation_version}) for frame, step in stale}
    cursor = [renewed.get(id(frame), frame) for frame in checkpoint.cursor]
    return checkpoint.model_copy(update={"cursor": cursor})


def _frames(cursor: Sequence[Frame],
            steps: Sequence[StepBase]) -> Iterator[tuple[Frame, StepBase]]:
    """Each frame of a checked cursor (checkpoint_check.py) with the step it is at;
    a frame past its sequence's last step is at none and is left out."""
    level: Sequence[StepBase] = steps
    for frame in cursor:
        if not 0 <= frame.step_index < len(level):
            return
        step = level[frame.step_index]
        yield frame, step
        level = step.child_steps()


__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_MIGRATIONS", "CheckpointMigration",
           "CheckpointVersionRefused", "check_versions", "migrated"]
