"""How a reserved attempt begins: its execution, from what it starts from.

An attempt starts from its run's latest checkpoint (migrated to this
release's format, `continuations.migrated`), or from the run's variables
when it has none, read by `attempt_reads` once the attempt was reserved. A
resume's token limit replaces the one the checkpoint carries; a later slice
of the same attempt (`advance`) continues it rather than starting over.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from stores.records import Budget, Checkpoint, RunRecord

from agent_runtime.continuations import migrated
from agent_runtime.execution import Execution
from agent_runtime.manifest import AgentManifest
from agent_runtime.state import RunState

if TYPE_CHECKING:
    from agent_runtime.run_host import RunHost


def execution_from(host: RunHost, record: RunRecord, checkpoint: Checkpoint | None,
                   agent: AgentManifest, *, budget: Budget | None = None,
                   deadline: datetime | None = None) -> Execution:
    """The execution of `record`'s reserved attempt, starting from `checkpoint`
    (`attempt_reads.attempt_start`); `CheckpointVersionRefused` when this release
    cannot continue its format (`continuations.migrated`)."""
    if checkpoint is None:
        state = RunState.initial(record.variables, record.budget.max_total_tokens)
        cursor = []
    else:
        checkpoint = migrated(checkpoint, agent.steps,
                              f"run {record.run_id}: checkpoint {checkpoint.seq}")
        state = RunState.from_checkpoint(checkpoint)
        cursor = list(checkpoint.cursor)
    if budget is not None:
        # A resume limit replaces the persisted one; omitting it keeps it.
        state.budget.max_total_tokens = budget.max_total_tokens
    # A later slice of an attempt (`advance`) starts from the attempt's own checkpoint.
    continues = checkpoint is not None and checkpoint.attempt == record.attempt
    return Execution(host, record, agent, state, cursor, deadline=deadline,
                     continues=continues)


__all__ = ["execution_from"]
