"""The state of a run between commit points, and its checkpoint form.

`RunState` is what a checkpoint saves apart from the cursor: variables, the
append-only step results and transcript, artifacts and the token budget. It
also keeps indexes derived from those lists (results by path, model request
counts), rebuilt once when a run is loaded, so nothing is counted twice and
nothing is scanned on the hot path.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from stores.records import (
    CONTRACT_VERSION,
    RUNTIME_VERSION,
    ArtifactRef,
    Checkpoint,
    CheckpointBudget,
    Frame,
    JsonObject,
    trusted_record,
)

from agent_runtime.budget import TokenBudget

# Kinds of step result entries.
STEP = "step"
ITERATION = "iteration"
LOOP_ITEMS = "loop-items"

COMPLETED = "completed"
SKIPPED = "skipped"

# Transcript item of a model response (counted for the scripted model's n-th request).
MODEL_RESPONSE = "model-response"


@dataclass
class RunState:
    """What a checkpoint saves besides the cursor, with indexes over it.

    `step_results` and `transcript` only grow (entries are never changed in
    place, so a checkpoint may share them); `results` and the request counts
    are derived from them and rebuilt by `from_checkpoint`.
    """

    variables: JsonObject
    budget: TokenBudget
    step_results: list[JsonObject] = field(default_factory=list)
    transcript: list[JsonObject] = field(default_factory=list)
    artifacts: list[ArtifactRef] = field(default_factory=list)
    # The run's event log (`Checkpoint.events`): what the emitter appended since the
    # last commit rides in the next checkpoint.
    events: list[JsonObject] = field(default_factory=list)
    seq: int = 0
    results: dict[tuple[str, str], JsonObject] = field(default_factory=dict)
    model_requests: int = 0
    step_requests: Counter[str] = field(default_factory=Counter)

    @classmethod
    def initial(cls, variables: JsonObject, max_total_tokens: int | None) -> RunState:
        return cls(variables=dict(variables), budget=TokenBudget(max_total_tokens))

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint) -> RunState:
        state = cls(
            variables=dict(checkpoint.variables),
            budget=TokenBudget(checkpoint.budget.max_total_tokens,
                               checkpoint.budget.consumed_tokens),
            artifacts=list(checkpoint.artifacts),
            events=list(checkpoint.events),
            seq=checkpoint.seq,
        )
        for entry in checkpoint.step_results:
            state.add_result(entry)
        for item in checkpoint.transcript:
            state.add_transcript(item)
        return state

    def add_result(self, entry: JsonObject) -> None:
        self.step_results.append(entry)
        self.results[(entry["kind"], entry["step_path"])] = entry

    def result(self, kind: str, step_path: str) -> JsonObject | None:
        return self.results.get((kind, step_path))

    def add_transcript(self, item: JsonObject) -> None:
        self.transcript.append(item)
        if item.get("type") == MODEL_RESPONSE:
            self.model_requests += 1
            self.step_requests[item.get("step_id", "")] += 1

    def to_checkpoint(self, *, run_id: str, attempt: int, manifest_hash: str,
                      cursor: list[Frame], created_at: datetime,
                      copy_lists: bool = False) -> Checkpoint:
        # Trusted: the lists are already valid and validating them again would
        # copy every entry on every checkpoint. The append-only lists are
        # shared, not copied: a copy per commit point costs more with every
        # entry, and a store reads them only during its write (the contract,
        # stores/base.py). `copy_lists` when other coroutines may append to
        # them during that write (a wave's members): shallow copies, since
        # entries are never changed in place. Variables are replaced in place,
        # so they are copied (a dict of a few keys).
        step_results, transcript, artifacts, events = (self.step_results, self.transcript,
                                                       self.artifacts, self.events)
        if copy_lists:
            step_results, transcript, artifacts, events = (
                list(step_results), list(transcript), list(artifacts), list(events))
        return trusted_record(Checkpoint, {
            "run_id": run_id, "seq": self.seq, "attempt": attempt,
            "manifest_hash": manifest_hash, "contract_version": CONTRACT_VERSION,
            "runtime_version": RUNTIME_VERSION, "cursor": cursor,
            "variables": dict(self.variables), "step_results": step_results,
            "transcript": transcript, "artifacts": artifacts,
            "budget": trusted_record(CheckpointBudget, {
                "max_total_tokens": self.budget.max_total_tokens,
                "consumed_tokens": self.budget.consumed_tokens}),
            "created_at": created_at, "events": events,
        })

    def usage(self) -> dict[str, int]:
        input_tokens = output_tokens = 0
        for item in self.transcript:
            usage = item.get("usage") or {}
            input_tokens += usage.get("inputTokens", 0)
            output_tokens += usage.get("outputTokens", 0)
        return {"consumed_tokens": self.budget.consumed_tokens, "input_tokens": input_tokens,
                "output_tokens": output_tokens, "model_requests": self.model_requests,
                "overshoot_tokens": self.budget.overshoot_tokens}
