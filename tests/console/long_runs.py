"""A run with many checkpoints, written straight into the store a test's `serve` uses.

Running an agent for 10,000 checkpoints would take minutes; the run page reads
only the store, so the run is built there: a record copied from a real run of
the same manifest (its tenant, manifest and hash as `serve` stored them; the
store does not hold a run to its manifest's `maxIterations`), one
attempt, then its checkpoints, each saved in a loop iteration's step (the
cursor says which), and its end.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from stores.records import Checkpoint, CheckpointBudget, Frame, RunStatus
from stores.sqlite import SqliteRunStore
from tests.api.serve_process import Serve, start, wait_for_status

# Two steps in each iteration: a checkpoint in each.
CHILDREN = ("draft", "review")
TOKENS_PER_CHECKPOINT = 7


def loop_manifest(manifest_id: str) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": manifest_id, "name": "Long loop",
            "variables": [{"key": "items", "type": "array", "value": []}],
            "steps": [{"id": "each", "type": "loop",
                       "loop": {"source": "items", "itemVariable": "item",
                                "maxIterations": 1_000},
                       "steps": [{"id": child, "type": "prompt",
                                  "prompt": f"{child} {{{{ item }}}}"} for child in CHILDREN]}]}


def step_path(seq: int) -> str:
    """Checkpoint `seq` (from 1) is saved in this step: iteration (seq-1)//2, its child."""
    iteration, child = divmod(seq - 1, len(CHILDREN))
    return f"each/{iteration}/{CHILDREN[child]}"


def seed_long_run(server: Serve, client: httpx.Client, run_id: str, checkpoints: int, *,
                  output: Any, started: datetime | None = None) -> None:
    """Store run `run_id`, completed with `output` after `checkpoints` checkpoints, one
    second apart (the last one 60 s ago)."""
    template = start(client, loop_manifest(f"{run_id}-template"))["runId"]
    wait_for_status(client, template, "completed")
    store = SqliteRunStore(server.workdir / "runs.sqlite", synchronous="NORMAL")
    source = store.load_run(template)
    assert source is not None
    begin = started or datetime.now(UTC) - timedelta(seconds=checkpoints + 60)
    store.create_run(source.model_copy(update={
        "run_id": run_id, "status": RunStatus.CREATED, "attempt": 0, "output": None,
        "checkpoint_seq": None, "consumed_tokens": 0, "lease_owner": None,
        "lease_expires_at": None, "run_key": None, "created_at": begin, "updated_at": begin,
        "options": {}}))
    run = store.resume_run(run_id, owner="long-run-seeder", now=begin, lease_seconds=86_400)
    for seq in range(1, checkpoints + 1):
        path = step_path(seq)
        iteration, child = divmod(seq - 1, len(CHILDREN))
        store.save_checkpoint(Checkpoint(
            run_id=run_id, seq=seq, attempt=run.attempt, manifest_hash=source.manifest_hash,
            cursor=[Frame(step_path="each", step_id="each", step_index=0, child_index=child,
                          continuation={"iteration": iteration}),
                    Frame(step_path=path, step_id=CHILDREN[child], step_index=child,
                          loop_iteration=iteration, continuation={"phase": "answered"})],
            variables={"items": [], "iteration": iteration},
            budget=CheckpointBudget(consumed_tokens=seq * TOKENS_PER_CHECKPOINT),
            created_at=begin + timedelta(seconds=seq)), expected_attempt=run.attempt)
    store.complete_run(run_id, expected_attempt=run.attempt, output=output,
                       at=begin + timedelta(seconds=checkpoints + 1))
