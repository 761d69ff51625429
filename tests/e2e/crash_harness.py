"""Crash injection: run a workload in forked children, SIGKILL them, resume, compare.

    harness = CrashHarness(workload, tmp_path)
    reference = harness.run("reference")                          # never killed
    crashed = harness.run("k7", kills={0: KillAfter(7)})          # dies after its 7th checkpoint
    assert_same_run(crashed, reference)

Every attempt of a run is a child forked from the test process. The child
opens its own store on the scenario's location (`SqliteRunStore` unless the
harness is given another opener), builds an
`AgentRuntime` with the workload's scripted model and tools, and starts or
resumes the run. Where its `Kill` plan says, the child sends itself SIGKILL:
right after its n-th checkpoint, n-th tool execution or n-th point of any
kind (an emitted event or a tool execution), all counted within that child;
or the parent kills it after a delay, which can land anywhere, an SQLite
commit or an fsync included.

Between attempts the parent acts as the operator would: a killed run is
resumed with `allow_running_takeover=True` (each child's clock starts an hour
after the previous one's, so the dead owner's lease has always expired and
nobody sleeps); an approval is approved, always at the same instant, so
`respondedAt` is an input both runs share; an `effect-unknown` suspension is
settled by looking at the outside world — the tools' execution log — and
supplying the result of a call that happened, or retrying one that did not.

Tools record every execution (tool, idempotency key, arguments, output) in an
append-only, fsynced log before they return, through the `ToolRecorder` the
workload's tool factory receives. That log is the outside world: it is what
shows whether an effect ran once.

Forking is cheap, but only sound without threads: the parent holds no store
open across a fork and refuses to fork while another thread runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from agent_runtime import AgentRuntime, RunStatus, Tool, ToolContext
from agent_runtime.events import CallbackEventSink, Event, JsonlEventSink, is_torn
from agent_runtime.models.scripted import Script, ScriptedModel
from agent_runtime.testing import FakeClock
from agent_runtime.tools.threads import TOOL_THREADS
from stores.base import RunStore
from stores.records import Checkpoint, EffectRecord, EffectStatus, RunRecord
from stores.sqlite import SqliteRunStore

BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)
# Every approval is answered at this instant, in every scenario: the answer is
# an input the compared runs share, like the script.
APPROVED_AT = BASE_TIME
LEASE_SECONDS = 60.0
CHILD_DEADLINE_SECONDS = 60  # a child still alive after this is hung: it is killed by SIGALRM
MAX_ATTEMPTS = 200
RUN_ID = "crash-run"  # every scenario has its own database, so the ids can be equal

Point = Literal["checkpoint", "tool", "any"]


# -- kill plans ------------------------------------------------------------------


@dataclass(frozen=True)
class KillAfter:
    """The child kills itself right after its `count`-th point of this kind.

    `checkpoint`: a `checkpoint.saved` event (the checkpoint is committed).
    `tool`: a tool execution, after the tool recorded its effect and before it
    returns (the effect happened; the engine has not seen its result). `any`:
    any event the engine emits, or a tool execution.
    """

    count: int
    point: Point = "checkpoint"


@dataclass(frozen=True)
class KillAfterDelay:
    """The parent kills the child `seconds` after it starts the run: anywhere at all."""

    seconds: float


Kill = KillAfter | KillAfterDelay
KillPlan = Mapping[int, Kill] | Callable[[int], Kill | None]


# -- the workload and the outside world ------------------------------------------


class ToolRecorder:
    """The tools' execution log: one JSON line per execution, appended and fsynced."""

    def __init__(self, path: Path, on_executed: Callable[[], None] = lambda: None) -> None:
        self.path = path
        self._on_executed = on_executed

    def executed(self, ctx: ToolContext, arguments: dict[str, Any], output: Any) -> None:
        """Record an execution; a tool calls this once its effect has happened."""
        line = json.dumps({"tool": ctx.tool_name, "key": ctx.idempotency_key,
                           "arguments": arguments, "output": output, "attempt": ctx.attempt},
                          sort_keys=True) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())  # one write: a kill leaves the line whole or absent
            os.fsync(fd)
        finally:
            os.close(fd)
        self._on_executed()

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        text = self.path.read_text(encoding="utf-8")
        assert not text or text.endswith("\n"), f"torn line in {self.path}"
        return [json.loads(line) for line in text.splitlines()]


@dataclass(frozen=True)
class Workload:
    """What every attempt runs: a manifest, its scripted model and its tools.

    `tools` builds the tools inside each child, recording to the recorder it
    is given; the manifest's model is `{provider: scripted, model: <anything>}`
    and `script` answers it.
    """

    manifest: dict[str, Any]
    script: Script
    tools: Callable[[ToolRecorder], list[Tool]]
    variables: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # run options (e.g. execution)

    def non_idempotent_tools(self) -> set[str]:
        tools = self.tools(ToolRecorder(Path(os.devnull)))
        return {tool.name for tool in tools if not tool.idempotent}


# -- what the parent saw -----------------------------------------------------------


@dataclass
class Attempt:
    """One child: its plan, whether it died, and what it emitted."""

    index: int
    kill: Kill | None
    killed: bool
    status_after: RunStatus | None
    seconds: float  # from starting the run to exiting or being killed
    events: list[Event]
    tool_executions: int

    @property
    def checkpoints(self) -> int:
        return sum(event.type == "checkpoint.saved" for event in self.events)

    @property
    def points(self) -> int:
        return len(self.events) + self.tool_executions


@dataclass(frozen=True)
class Snapshot:
    """A scenario as child `index` was about to start: a copy of its files (store,
    logs) and what the operator had done so far. A later scenario can start from
    it instead of repeating the attempts before (they are deterministic)."""

    directory: Path
    index: int
    started: bool  # whether the run existed
    attempts: tuple[Attempt, ...]
    approvals: tuple[str, ...]
    resolutions: dict[str, dict[str, Any]]


@dataclass
class Outcome:
    """A scenario's run once it ended, and how it got there."""

    name: str
    record: RunRecord
    checkpoint: Checkpoint
    effects: list[EffectRecord]
    executions: list[dict[str, Any]]
    attempts: list[Attempt]
    approvals: list[str]  # approval ids, in the order they were answered
    resolutions: list[tuple[str, str]]  # (key, action) for every effect-unknown settled
    snapshots: list[Snapshot]  # one before every child, when asked for

    @property
    def kills(self) -> int:
        return sum(attempt.killed for attempt in self.attempts)

    def describe(self) -> str:
        steps = ", ".join(
            f"#{a.index} {a.kill or 'no kill'} -> {'KILLED' if a.killed else 'ended'} "
            f"({a.status_after.value if a.status_after else 'no run'})" for a in self.attempts)
        return f"scenario {self.name!r}: {steps}"


# -- the child ---------------------------------------------------------------------


class Tripwire:
    """Counts a child's points and kills the process at the planned one."""

    def __init__(self, kill: Kill | None) -> None:
        self.plan = kill if isinstance(kill, KillAfter) else None
        self.seen: Counter[str] = Counter()

    def passed(self, kind: Literal["checkpoint", "tool", "event"]) -> None:
        self.seen[kind] += 1
        self.seen["any"] += 1
        plan = self.plan
        if plan is not None and plan.point in (kind, "any") and self.seen[plan.point] == plan.count:
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # never reached: SIGKILL to oneself is delivered before kill returns

    def on_event(self, event: Event) -> None:
        self.passed("checkpoint" if event.type == "checkpoint.saved" else "event")


@dataclass(frozen=True)
class Order:
    """What one child is told: its index, plan, and whether to start or resume."""

    index: int
    kill: Kill | None
    start: bool
    resolutions: dict[str, dict[str, Any]]


def _child(workload: Workload, open_store: Callable[[Path], RunStore], paths: ScenarioPaths,
           order: Order, ready: int) -> None:
    """A child attempt's whole life; it never returns. It writes to `ready` as
    it starts the run, so a parent's delay counts from there, not from the fork."""
    code = 0
    try:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the parent's timeout handler is not ours
        signal.alarm(CHILD_DEADLINE_SECONDS)
        tripwire = Tripwire(order.kill)
        model = ScriptedModel()
        model.add_script(str(workload.manifest["model"]["model"]), workload.script)
        tools = workload.tools(ToolRecorder(paths.executions,
                                            on_executed=lambda: tripwire.passed("tool")))
        with open_store(paths.store) as store:
            runtime = AgentRuntime(
                store=store, models={"scripted": model}, tools=tools,
                event_sinks=[JsonlEventSink(paths.events), CallbackEventSink(tripwire.on_event)],
                clock=FakeClock(BASE_TIME + timedelta(hours=order.index + 1)),
                owner=f"crash-child-{order.index}", lease_seconds=LEASE_SECONDS)
            if order.start:
                call = runtime.run(manifest=workload.manifest, variables=workload.variables,
                                   run_id=RUN_ID, options=workload.options)
            else:
                call = runtime.run(run_id=RUN_ID, resume=True, allow_running_takeover=True,
                                   effect_resolutions=order.resolutions)
            os.write(ready, b".")
            os.close(ready)
            asyncio.run(call)
    except BaseException:
        paths.child_error.write_text(traceback.format_exc(), encoding="utf-8")
        code = 1
    os._exit(code)


# -- the parent --------------------------------------------------------------------


@dataclass(frozen=True)
class ScenarioPaths:
    directory: Path

    @property
    def store(self) -> Path:
        return self.directory / "store"

    @property
    def events(self) -> Path:
        return self.directory / "events.jsonl"

    @property
    def executions(self) -> Path:
        return self.directory / "executions.jsonl"

    @property
    def child_error(self) -> Path:
        return self.directory / "child-error.txt"


def _new_events(path: Path, offset: int) -> tuple[list[Event], int]:
    """The events appended since `offset`, and the offset after the last whole line."""
    if not path.exists():
        return [], offset
    with path.open("rb") as source:
        source.seek(offset)
        data = source.read()
    whole = data[:data.rfind(b"\n") + 1]
    # A child killed mid-line leaves a fragment, which the next child's sink ends.
    events = [Event.from_json(json.loads(line)) for line in whole.splitlines()
              if not is_torn(line.decode("utf-8", "replace"))]
    return events, offset + len(whole)


class CrashHarness:
    """Runs a workload to its end through killed and resumed child attempts."""

    def __init__(self, workload: Workload, directory: Path, *,
                 open_store: Callable[[Path], RunStore] = SqliteRunStore) -> None:
        self.workload = workload
        self.directory = directory
        self.open_store = open_store

    def run(self, name: str, kills: KillPlan | None = None, *,
            start_from: Snapshot | None = None, keep_snapshots: bool = False) -> Outcome:
        """Run scenario `name` until the run is terminal; `kills` maps a child's
        index (0 = the first) to its plan. With `start_from`, the scenario begins
        as the snapshot's did, at its child index."""
        plan = _plan_function(kills)
        paths = ScenarioPaths(self.directory / name)
        attempts: list[Attempt] = []
        approvals: list[str] = []
        resolutions: dict[str, dict[str, Any]] = {}
        started = False
        first = 0
        if start_from is None:
            paths.directory.mkdir(parents=True)
            self.open_store(paths.store).close()  # created here, never held open across a fork
        else:
            shutil.copytree(start_from.directory, paths.directory)
            attempts, approvals = list(start_from.attempts), list(start_from.approvals)
            resolutions, started = dict(start_from.resolutions), start_from.started
            first = start_from.index
        settled: list[tuple[str, str]] = []
        snapshots: list[Snapshot] = []
        event_offset = paths.events.stat().st_size if paths.events.exists() else 0
        recorder = ToolRecorder(paths.executions)
        for index in range(first, MAX_ATTEMPTS):
            if keep_snapshots:
                copy = self.directory / f"{name}.snapshots" / str(index)
                shutil.copytree(paths.directory, copy)  # no store is open here
                snapshots.append(Snapshot(copy, index, started, tuple(attempts),
                                          tuple(approvals), resolutions))
            kill = plan(index)
            executions_before = len(recorder.entries())
            killed, seconds = self._fork(paths, Order(index, kill, not started, resolutions))
            events, event_offset = _new_events(paths.events, event_offset)
            resolutions = {}
            with self.open_store(paths.store) as store:
                record = store.load_run(RUN_ID)
                started = record is not None
                attempts.append(Attempt(
                    index=index, kill=kill, killed=killed,
                    status_after=None if record is None else record.status, seconds=seconds,
                    events=events, tool_executions=len(recorder.entries()) - executions_before))
                if record is None or record.status in (RunStatus.RUNNING, RunStatus.CREATED):
                    continue  # killed: the next child starts or takes over
                if record.status.terminal:
                    outcome = self._outcome(name, store, paths, attempts=attempts,
                                            approvals=approvals, settled=settled)
                    outcome.snapshots = snapshots
                    return outcome
                suspension = record.suspension
                assert record.status is RunStatus.SUSPENDED and suspension is not None
                if suspension.reason == "approval":
                    # Answered already when the child died before taking the run over.
                    if suspension.decision is None:
                        operator = AgentRuntime(store=store, clock=FakeClock(APPROVED_AT),
                                                owner="operator")
                        approvals.append(operator.approve(RUN_ID, responded_by="operator"))
                elif suspension.reason == "effect-unknown":
                    key = str(suspension.details["key"])
                    resolutions = {key: self._settle(recorder, key)}
                    settled.append((key, resolutions[key]["action"]))
                else:
                    raise AssertionError(f"unexpected suspension {suspension.reason!r}")
        raise AssertionError(f"scenario {name!r} did not end within {MAX_ATTEMPTS} attempts")

    def _fork(self, paths: ScenarioPaths, order: Order) -> tuple[bool, float]:
        """Run one child to its end: (whether it died of SIGKILL, seconds it ran the run)."""
        # The tool pool's idle workers (kept for the next tool call) are the
        # one kind of thread a test before this one may leave: end them.
        TOOL_THREADS.shutdown()
        if threading.active_count() > 1:
            raise RuntimeError("refusing to fork while other threads run: the child could "
                               "inherit a lock one of them holds")
        ready_read, ready_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_read)
            _child(self.workload, self.open_store, paths, order, ready_write)
        os.close(ready_write)
        try:
            os.read(ready_read, 1)  # the child starts the run now (b"": it died before)
        finally:
            os.close(ready_read)
        ready = time.monotonic()
        if isinstance(order.kill, KillAfterDelay):
            time.sleep(order.kill.seconds)
            os.kill(pid, signal.SIGKILL)  # unreaped, so the pid is still this child's
        _, status = os.waitpid(pid, 0)
        seconds = time.monotonic() - ready
        if os.WIFSIGNALED(status):
            assert os.WTERMSIG(status) == signal.SIGKILL, (
                f"child {order.index} died of signal {os.WTERMSIG(status)} (SIGALRM: hung)")
            return True, seconds
        if os.waitstatus_to_exitcode(status) != 0:
            error = paths.child_error.read_text(encoding="utf-8") \
                if paths.child_error.exists() else "(no traceback)"
            raise AssertionError(f"child {order.index} of {paths.directory.name} failed:\n{error}")
        return False, seconds

    @staticmethod
    def _settle(recorder: ToolRecorder, key: str) -> dict[str, Any]:
        """An operator's answer to `effect-unknown`: did the call happen out there?"""
        done = [entry for entry in recorder.entries() if entry["key"] == key]
        if done:
            return {"action": "result", "result": done[0]["output"]}
        return {"action": "retry"}

    @staticmethod
    def _outcome(name: str, store: RunStore, paths: ScenarioPaths, *,
                 attempts: list[Attempt], approvals: list[str],
                 settled: list[tuple[str, str]]) -> Outcome:
        record = store.load_run(RUN_ID)
        checkpoint = store.load_latest_checkpoint(RUN_ID)
        assert record is not None and checkpoint is not None
        return Outcome(name=name, record=record, checkpoint=checkpoint,
                       effects=store.list_effects(RUN_ID),
                       executions=ToolRecorder(paths.executions).entries(), attempts=attempts,
                       approvals=approvals, resolutions=settled, snapshots=[])


def _plan_function(kills: KillPlan | None) -> Callable[[int], Kill | None]:
    if kills is None:
        return lambda index: None
    if callable(kills):
        return kills
    return kills.get


# -- comparing a crashed run with the uninterrupted one ------------------------------


def _key_order(transcript: list[dict[str, Any]]) -> dict[str, str]:
    """Idempotency keys are random per run: name them by first appearance."""
    names: dict[str, str] = {}

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for name, inner in value.items():
                if name == "idempotencyKey" and isinstance(inner, str):
                    names.setdefault(inner, f"key-{len(names) + 1}")
                else:
                    walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(transcript)
    return names


def _renamed(value: Any, names: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        return {name: names.get(inner, inner) if name == "idempotencyKey"
                else _renamed(inner, names) for name, inner in value.items()}
    if isinstance(value, list):
        return [_renamed(inner, names) for inner in value]
    return value


def normalised_transcript(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript without what legitimately differs between runs: item ids,
    timestamps and the literal idempotency keys (kept as a consistent naming)."""
    names = _key_order(transcript)
    return [_renamed({k: v for k, v in item.items() if k not in ("id", "created_at")}, names)
            for item in transcript]


def _logical_calls(outcome: Outcome) -> dict[str, tuple[str, Any]]:
    """key -> (tool, arguments) of every tool call the model asked for."""
    calls = {}
    for item in outcome.checkpoint.transcript:
        for part in item.get("content", []):
            if part.get("type") == "tool-call":
                call = part["call"]
                calls[call["idempotencyKey"]] = (call["name"], call["input"])
    return calls


def ledger(outcome: Outcome) -> dict[str, Any]:
    """The effect ledger by normalised key: the stored result of every effect."""
    names = _key_order(outcome.checkpoint.transcript)
    return {names.get(effect.key, f"unknown:{effect.key}"): effect.result
            for effect in outcome.effects}


def assert_same_run(crashed: Outcome, reference: Outcome, *,
                    non_idempotent: Collection[str] = ()) -> None:
    """The crashed run ended exactly as the uninterrupted one, and every effect happened once.

    Compared: status, output, variables, token budget, step results (without
    their timestamps), transcript (normalised), the approvals asked and
    answered, and the effect ledger. Every logical tool call has exactly one
    completed effect with the reference's result; the execution log shows
    every call executed, a repeat only with the same key and arguments (an
    idempotent tool re-dispatched after a kill), a non-idempotent tool exactly
    once.
    """
    where = crashed.describe()
    assert crashed.record.status == reference.record.status, where
    assert crashed.record.output == reference.record.output, where
    assert crashed.checkpoint.variables == reference.checkpoint.variables, where
    # A model response lost with its attempt is asked again but paid for once.
    assert crashed.checkpoint.budget == reference.checkpoint.budget, where
    assert crashed.record.consumed_tokens == reference.record.consumed_tokens, where

    def results(outcome: Outcome) -> list[dict[str, Any]]:
        return [{k: v for k, v in entry.items() if k != "at"}
                for entry in outcome.checkpoint.step_results]

    assert results(crashed) == results(reference), where
    assert normalised_transcript(crashed.checkpoint.transcript) == \
        normalised_transcript(reference.checkpoint.transcript), where
    # Each approval was asked once and its answer read on resume, never asked again.
    assert crashed.approvals == reference.approvals, where
    assert len(set(crashed.approvals)) == len(crashed.approvals), where

    calls = _logical_calls(crashed)
    keys = [effect.key for effect in crashed.effects]
    assert len(keys) == len(set(keys)), f"a key twice in the ledger: {where}"
    assert set(keys) == set(calls), f"ledger keys != the transcript's tool calls: {where}"
    assert all(effect.status is EffectStatus.COMPLETED for effect in crashed.effects), where
    assert ledger(crashed) == ledger(reference), where

    runs: dict[str, list[dict[str, Any]]] = {}
    for entry in crashed.executions:
        assert entry["key"] in calls, f"an execution with a key no call has: {entry} {where}"
        runs.setdefault(entry["key"], []).append(entry)
    assert set(runs) == set(calls), f"a logical call never executed: {where}"
    for key, entries in runs.items():
        tool, arguments = calls[key]
        assert all((e["tool"], e["arguments"]) == (tool, arguments) for e in entries), where
        if tool in non_idempotent:
            assert len(entries) == 1, f"{tool} ran {len(entries)} times for one key: {where}"


def repeated_executions(outcome: Outcome) -> int:
    """Executions beyond the first per key (idempotent re-dispatches with the same key)."""
    return len(outcome.executions) - len({entry["key"] for entry in outcome.executions})
