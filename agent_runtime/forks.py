"""What a fork is made of: the new run's record, and its first checkpoint.

A fork is a new run that starts from a saved checkpoint of another. Its
record has the source's definition, variables and runtime options, with
`options["forked_from"] = {"run_id", "seq", "variables"?}` naming the
checkpoint (and the variables an operator edited, when any); its first
attempt, wherever it executes, copies that checkpoint as its own seq 1
(`first_checkpoint`) and continues from it. `AgentRuntime.create_fork`
checks and stores it.
"""

from __future__ import annotations

from datetime import datetime

from stores.records import Budget, Checkpoint, JsonObject, RunRecord

from agent_runtime.checkpoint_check import ForkSourceMissing
from agent_runtime.run_options import FORKED_FROM, without_origin


def forked_record(source: RunRecord, checkpoint: Checkpoint, *, run_id: str, now: datetime,
                  budget: Budget | None, tenant: str | None,
                  variables: JsonObject | None) -> RunRecord:
    """The record of a fork of `source` from `checkpoint`: its token limit `budget`, else
    the one in force at the checkpoint; its tenant `tenant`, else the source's."""
    origin: JsonObject = {"run_id": source.run_id, "seq": checkpoint.seq}
    if variables is not None:
        # Kept with the origin: the first attempt builds seq 1 from both.
        origin["variables"] = variables
    return RunRecord(run_id=run_id, manifest_hash=source.manifest_hash,
                     manifest=source.manifest, variables=source.variables,
                     budget=budget or Budget(max_total_tokens=checkpoint.budget.max_total_tokens),
                     tenant=source.tenant if tenant is None else tenant,
                     options={**without_origin(source.options), FORKED_FROM: origin},
                     created_at=now, updated_at=now)


def fork_origin(record: RunRecord) -> tuple[str, int | None]:
    """The run and seq of the checkpoint a forked run starts from."""
    origin = record.options[FORKED_FROM]
    seq = origin.get("seq")
    return str(origin.get("run_id")), seq if isinstance(seq, int) else None


def first_checkpoint(record: RunRecord, source: Checkpoint | None, now: datetime) -> Checkpoint:
    """A forked run's seq 1: its source checkpoint, as this run's, with the edited
    variables and the fork's token limit. Raises `ForkSourceMissing` without one."""
    if source is None:
        source_id, seq = fork_origin(record)
        raise ForkSourceMissing(f"run {record.run_id} was forked from checkpoint {seq} of run "
                                f"{source_id}, which no longer exists (deleted?)")
    start = source.model_copy(deep=True, update={
        "run_id": record.run_id, "seq": 1, "attempt": record.attempt, "created_at": now,
        "events": []})  # the source's log is the source's: this run's starts empty
    start.budget.max_total_tokens = record.budget.max_total_tokens
    edited = record.options[FORKED_FROM].get("variables")
    if isinstance(edited, dict):
        start.variables = edited
    return start
