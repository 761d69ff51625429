"""Checkpoints keep resuming across releases: their versions are read, newer ones refused
by name, older ones migrated (agent_runtime/continuations.py).

`tests/fixtures/checkpoints/format-<CHECKPOINT_FORMAT>.json` holds runs this
release left part way (the run record and every checkpoint), each with how it
is carried on and the output it ends with. This release must write exactly
those bytes again, so a change of shape without a version bump fails here;
a release that bumps a version keeps the old file (resumed below after a
simulated bump) and writes the new one:

    python tests/agent_runtime/test_checkpoint_formats.py   # writes this release's file
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_harness import ECHO, Harness, manifest

from agent_runtime import RunStatus, continuations
from agent_runtime.continuations import CHECKPOINT_FORMAT, CheckpointVersionRefused
from agent_runtime.events import Event, ListEventSink
from agent_runtime.manifest import AgentManifest, LoopStep
from stores.memory import MemoryRunStore
from stores.records import Checkpoint, JsonObject, RunRecord
from stores.records import RunStatus as Status

RANDOM_ID = re.compile(r"[0-9a-f]{32}")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
WRITER = "fixture-writer"


class Died(BaseException):
    """The process writing a fixture dies here."""


class DieAfter(ListEventSink):
    """Dies once the run has saved checkpoint `seq` (0: never)."""

    def __init__(self, seq: int) -> None:
        super().__init__()
        self.seq = seq

    def emit(self, event: Event) -> None:
        super().emit(event)
        if event.type == "checkpoint.saved" and event.data.get("seq") == self.seq:
            raise Died()


SAY = {"id": "say", "type": "prompt", "outputVariable": "said",
       "prompt": "n={{ n }} prev={{ loop.previous.variables.n }} before={{ loop.previous.output }}"}


def loop_with_an_approval() -> AgentManifest:
    """Suspended at the approval of the loop's second iteration."""
    return manifest({"id": "each", "type": "loop", "includeInFinalOutput": True,
                     "loop": {"source": "numbers", "itemVariable": "n"},
                     "steps": [SAY, {"id": "check", "type": "approval", "prompt": "ok?",
                                     "when": "n == 2"}]},
                    variables=[{"key": "numbers", "type": "array", "value": [1, 2, 3]}])


def goal_loop() -> AgentManifest:
    """Its process died after the third iteration's checkpoint."""
    return manifest({"id": "until", "type": "loop", "includeInFinalOutput": True,
                     "loop": {"maxIterations": 10, "itemVariable": "n",
                              "goal": "loop.iteration >= 4"}, "steps": [SAY]})


# name: (manifest, checkpoint after which the writing process dies, or 0)
CASES: dict[str, tuple[Callable[[], AgentManifest], int]] = {
    "loop-suspended-at-an-approval": (loop_with_an_approval, 0),
    "goal-loop-died-between-iterations": (goal_loop, 3),
}


def write_case(name: str) -> JsonObject:
    """Run case `name` as this release does, up to where it stops, and what it ends with."""
    agent, die_after = CASES[name][0](), CASES[name][1]
    h = Harness()
    h.events = DieAfter(die_after)
    h.runtime = h.make_runtime(owner=WRITER)
    with contextlib.suppress(Died):
        h.run(agent, options=ECHO, run_id=name)
    record = h.store.load_run(name)
    assert record is not None and record.status in (Status.SUSPENDED, Status.RUNNING)
    last = record.checkpoint_seq or 0
    checkpoints = h.store.load_checkpoints(name, 1, last)
    ended = carry_on(h.store, name)
    return {"run": record.model_dump(mode="json"),
            "checkpoints": [checkpoint.model_dump(mode="json") for checkpoint in checkpoints],
            "ends": {"status": ended.status.value, "output": ended.output}}


def carry_on(store: MemoryRunStore, run_id: str) -> Any:
    """What happens next to a run a fixture left: approved and resumed when suspended,
    taken over by a new owner when its process died."""
    h = Harness(store=store)
    record = store.load_run(run_id)
    assert record is not None
    if record.status is Status.SUSPENDED:
        h.runtime.approve(run_id)
        return h.resume(run_id)
    h.clock.advance(h.lease_seconds + 1)
    return h.resume(run_id, allow_running_takeover=True)


def this_release() -> JsonObject:
    return {"format": CHECKPOINT_FORMAT,
            "cases": {name: _numbered_ids(write_case(name)) for name in CASES}}


def _numbered_ids(body: Any, seen: dict[str, str] | None = None) -> Any:
    """`body` with each random id (a transcript item's, an event's) replaced by its
    number in order of appearance, and each duration an event measured on the wall
    clock as 0, so two writes of one run compare equal."""
    seen = {} if seen is None else seen
    if isinstance(body, list):
        return [_numbered_ids(item, seen) for item in body]
    if not isinstance(body, dict):
        return body
    numbered = {}
    for key, value in body.items():
        if key == "id" and isinstance(value, str) and RANDOM_ID.fullmatch(value):
            numbered[key] = seen.setdefault(value, f"id-{len(seen) + 1}")
        elif key == "duration_ms" and isinstance(value, int | float):
            numbered[key] = 0
        else:
            numbered[key] = _numbered_ids(value, seen)
    return numbered


def fixture(format_: str) -> JsonObject:
    loaded: JsonObject = json.loads((FIXTURES / f"format-{format_}.json").read_text())
    return loaded


def seeded(case: JsonObject) -> tuple[MemoryRunStore, str]:
    """A store holding a fixture's run as it was left, written through the store's API."""
    record = RunRecord.model_validate(case["run"])
    checkpoints = [Checkpoint.model_validate(body) for body in case["checkpoints"]]
    store = MemoryRunStore()
    store.create_run(record.model_copy(update={
        "status": Status.CREATED, "attempt": 0, "checkpoint_seq": None, "suspension": None,
        "lease_owner": None, "lease_expires_at": None}))
    at = record.created_at
    store.resume_run(record.run_id, owner=WRITER, now=at, lease_seconds=30)
    for checkpoint in checkpoints:
        store.save_checkpoint(checkpoint, expected_attempt=record.attempt)
    if record.status is Status.SUSPENDED:
        assert record.suspension is not None
        store.suspend_run(record.run_id, expected_attempt=record.attempt,
                          reason=record.suspension.reason, details=record.suspension.details,
                          at=at)
    return store, record.run_id


def test_this_release_writes_the_checkpoints_of_its_format_fixture() -> None:
    assert this_release() == fixture(CHECKPOINT_FORMAT), (
        "checkpoints changed shape: bump CONTRACT_VERSION (the body) or the step kind's "
        "continuation_version with a migration, keep the old fixture, and write the new "
        "one with `python tests/agent_runtime/test_checkpoint_formats.py`")


def cases(format_: str) -> Iterator[tuple[str, JsonObject]]:
    yield from fixture(format_)["cases"].items()


@pytest.mark.parametrize("name", list(CASES))
def test_a_run_left_by_this_release_resumes_to_its_end(name: str) -> None:
    case = fixture(CHECKPOINT_FORMAT)["cases"][name]
    store, run_id = seeded(case)
    ended = carry_on(store, run_id)
    assert (ended.status.value, ended.output) == (case["ends"]["status"], case["ends"]["output"])


def loop_v2(monkeypatch: pytest.MonkeyPatch) -> list[JsonObject]:
    """The next release, simulated: loops keep `next` as `nextIteration` (version 2)."""
    migrated: list[JsonObject] = []

    def migrate(cls: type[LoopStep], continuation: JsonObject, version: int) -> JsonObject:
        assert version == 1
        migrated.append(dict(continuation))
        continuation["nextIteration"] = continuation.pop("next")
        return continuation

    from agent_runtime.steps import loop as loop_module
    original = loop_module.LoopStepExecutor.execute

    async def execute(self: Any, step: LoopStep, frame: Any, ctx: Any, resume: Any) -> Any:
        # Version 2's executor reads its own key, then runs version 1's logic.
        if "nextIteration" in frame.continuation:
            frame.continuation["next"] = frame.continuation.pop("nextIteration")
        return await original(self, step, frame, ctx, resume)

    monkeypatch.setattr(LoopStep, "continuation_version", 2)
    monkeypatch.setattr(LoopStep, "migrate_continuation", classmethod(migrate))
    monkeypatch.setattr(loop_module.LoopStepExecutor, "execute", execute)
    return migrated


@pytest.mark.parametrize("name", list(CASES))
def test_after_a_version_bump_the_previous_releases_runs_are_migrated_and_resume(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    migrated_bodies: list[str] = []

    def bring_up(checkpoint: Checkpoint) -> Checkpoint:
        migrated_bodies.append(checkpoint.contract_version)
        return checkpoint

    major, minor = CHECKPOINT_FORMAT.split(".")
    monkeypatch.setattr(continuations, "CHECKPOINT_FORMAT", f"{major}.{int(minor) + 1}")
    monkeypatch.setitem(continuations.CHECKPOINT_MIGRATIONS, CHECKPOINT_FORMAT,
                        (f"{major}.{int(minor) + 1}", bring_up))
    migrated_loops = loop_v2(monkeypatch)
    case = fixture(CHECKPOINT_FORMAT)["cases"][name]
    store, run_id = seeded(case)
    ended = carry_on(store, run_id)
    assert (ended.status.value, ended.output) == (case["ends"]["status"], case["ends"]["output"])
    assert migrated_bodies == [CHECKPOINT_FORMAT]
    assert [body.get("next") for body in migrated_loops] == [
        case["checkpoints"][-1]["cursor"][0]["continuation"]["next"]]


@pytest.mark.parametrize("name", list(CASES))
def test_runs_left_in_format_1_0_resume_with_an_event_log_from_their_resume(name: str) -> None:
    case = fixture("1.0")["cases"][name]
    store, run_id = seeded(case)
    ended = carry_on(store, run_id)
    assert (ended.status.value, ended.output) == (case["ends"]["status"], case["ends"]["output"])
    logged = store.list_events(run_id, limit=1000)
    assert logged and logged[0].type == "run.resumed" and logged[0].cursor == 1


def test_a_checkpoint_of_a_newer_format_is_refused_by_name_and_the_run_left_as_it_was() -> None:
    case = fixture(CHECKPOINT_FORMAT)["cases"]["goal-loop-died-between-iterations"]
    case["checkpoints"][-1]["contract_version"] = "9.0"
    case["checkpoints"][-1]["runtime_version"] = "9.1.0"
    store, run_id = seeded(case)
    before = store.load_run(run_id)
    with pytest.raises(CheckpointVersionRefused,
                       match=r"checkpoint \d+ is in checkpoint format 9\.0, written by "
                             r"agent-runtime 9\.1\.0; this release reads format "
                             + re.escape(CHECKPOINT_FORMAT)):
        carry_on(store, run_id)
    assert store.load_run(run_id) == before


def test_a_frame_of_a_newer_continuation_version_is_refused_by_name() -> None:
    case = fixture(CHECKPOINT_FORMAT)["cases"]["goal-loop-died-between-iterations"]
    case["checkpoints"][-1]["cursor"][0]["continuation_version"] = 7
    store, run_id = seeded(case)
    with pytest.raises(CheckpointVersionRefused,
                       match=r"step 'until' \(loop\) saved continuation version 7.*"
                             r"loop steps read version 1 and older"):
        carry_on(store, run_id)


def test_an_older_continuation_its_kind_cannot_migrate_is_refused_by_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LoopStep, "continuation_version", 2)
    store, run_id = seeded(fixture(CHECKPOINT_FORMAT)["cases"]["goal-loop-died-between-iterations"])
    with pytest.raises(CheckpointVersionRefused,
                       match=r"step 'until' \(loop\) saved continuation version 1, and its "
                             r"kind \(version 2\) has no migrate_continuation"):
        carry_on(store, run_id)


def test_new_frames_carry_their_kinds_continuation_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LoopStep, "continuation_version", 3)
    h = Harness()
    result = h.run(loop_with_an_approval(), options=ECHO)
    assert result.status is RunStatus.SUSPENDED
    suspended_at = h.store.load_latest_checkpoint(result.run_id)
    assert suspended_at is not None
    assert [(frame.step_id, frame.continuation_version) for frame in suspended_at.cursor] == [
        ("each", 3), ("check", 1)]


if __name__ == "__main__":
    FIXTURES.mkdir(parents=True, exist_ok=True)
    target = FIXTURES / f"format-{CHECKPOINT_FORMAT}.json"
    target.write_text(json.dumps(this_release(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {target}")
