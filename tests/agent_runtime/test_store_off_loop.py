"""Store calls run off the event loop (issue 33, acceptance 3; agent_runtime/store_thread.py).

A slow store (a commit of 50 ms, a lease renewal that waits) holds up only the
coroutine that made the call: the other members of a parallel wave go on
with their model calls meanwhile, where on the loop thread every commit held
them all. Asserted from the order of events, never from wall time. The
store's calls keep their order and their outcomes (results, the very
exceptions raised), and its thread lives only while runs execute.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from engine_harness import manifest

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.api.local_launcher import LocalLauncher
from agent_runtime.events import CallbackEventSink, Event
from agent_runtime.models.base import ModelRequest, ModelResponse, TextListener
from agent_runtime.store_thread import THREAD_NAME, StorePool, StoreThread
from agent_runtime.testing import scripted
from stores.base import StaleAttempt
from stores.memory import MemoryRunStore
from stores.records import RunRecord
from stores.sqlite import SqliteRunStore

IDS = ("north", "south", "east", "west")
PARALLEL = {"mode": "parallel", "maxConcurrency": 4}
COMMIT_SECONDS = 0.05
HANG_DEADLINE = 30.0  # only a hung test waits this long
# How long a gated store call waits for the loop to let it go: only reached when
# the call holds the loop (the engine before issue 33), where the loop never can.
GATE_DEADLINE = 5.0


class SlowCommits(SqliteRunStore):
    """A real SQLite store whose every commit takes 50 ms more, marked in a shared log
    (appended from whichever thread makes the call) with the thread it ran on."""

    def __init__(self, path: Path, log: list[tuple[str, ...]]) -> None:
        super().__init__(path)
        self.log = log
        self.threads: set[str] = set()

    def _slowly(self, write: Any, *args: Any, **kwargs: Any) -> Any:
        self.threads.add(threading.current_thread().name)
        self.log.append(("commit", "begin"))
        time.sleep(COMMIT_SECONDS)
        try:
            return write(*args, **kwargs)
        finally:
            self.log.append(("commit", "end"))

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self._slowly(super().save_checkpoint, *args, **kwargs)

    def save_checkpoint_settling(self, *args: Any, **kwargs: Any) -> None:
        self._slowly(super().save_checkpoint_settling, *args, **kwargs)


def fan_out_with_a_tool_round() -> Any:
    """Four independent prompts; each first asks for a tool it does not have (its answer
    is a commit point of its own), then answers: two model calls, three commits each."""
    return manifest(*[{"id": step_id, "type": "prompt", "prompt": f"Report on the {step_id}.",
                       "outputVariable": step_id, "includeInFinalOutput": True}
                      for step_id in IDS])


def instant_answers() -> dict[str, list[dict[str, Any]]]:
    # No delay: a model call that answers at once never lets the loop run, so what
    # interleaves the members is only what the engine's store calls allow.
    return {step_id: [{"toolCalls": [{"name": "missing", "arguments": {}}]},
                      {"text": f"{step_id} report"}] for step_id in IDS}


def model_log(log: list[tuple[str, ...]]) -> CallbackEventSink:
    def record(event: Event) -> None:
        if event.type in ("model.started", "model.completed"):
            log.append(("model", event.type.removeprefix("model."), event.step_path or ""))

    return CallbackEventSink(record)


def test_wave_members_model_calls_go_on_while_a_commit_is_stored(tmp_path: Path) -> None:
    log: list[tuple[str, ...]] = []
    store = SlowCommits(tmp_path / "runs.sqlite", log)
    runtime = AgentRuntime(store=store, models={"scripted": scripted(by_step=instant_answers())},
                           event_sinks=[model_log(log)])
    with store:
        result = runtime.run_sync(manifest=fan_out_with_a_tool_round(),
                                  options={"model": "scripted/test", "execution": PARALLEL})
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == [f"{step_id} report" for step_id in IDS]

    calls = [entry for entry in log if entry[0] == "model"]
    assert len(calls) == 16  # two calls of four members, each started and completed

    def at(what: str, step_id: str) -> list[int]:
        return [index for index, entry in enumerate(calls) if entry == ("model", what, step_id)]

    first_answers = [at("completed", step_id)[0] for step_id in IDS]
    second_requests = [at("started", step_id)[1] for step_id in IDS]
    # The four members' conversations overlap: every member had its first answer
    # before any member sent its second request. With commits on the loop thread,
    # the first member's whole conversation (two calls, three 50 ms commits) ran
    # before the second member's first call.
    assert max(first_answers) < min(second_requests), calls

    # And model calls start and finish while a commit is being stored (between its
    # begin and end marks); a commit on the loop thread held every member.
    inside = []
    open_commit = False
    for entry in log:
        if entry[0] == "commit":
            open_commit = entry[1] == "begin"
        elif open_commit:
            inside.append(entry)
    assert inside, log
    assert threading.main_thread().name not in store.threads
    assert all(name.startswith(THREAD_NAME) for name in store.threads)


def test_wave_commits_store_each_members_progress_as_it_was(tmp_path: Path) -> None:
    """A commit is stored on its own thread while the other members append to the
    run's transcript: each checkpoint holds the transcript as it was when it was
    taken, consistent with its cursor (no member's answer without the round that
    asked for it), so a resume from any of them repeats nothing."""
    log: list[tuple[str, ...]] = []
    store = SlowCommits(tmp_path / "runs.sqlite", log)
    runtime = AgentRuntime(store=store, models={"scripted": scripted(by_step=instant_answers())})
    with store:
        result = runtime.run_sync(manifest=fan_out_with_a_tool_round(),
                                  options={"model": "scripted/test", "execution": PARALLEL})
        assert result.status is RunStatus.COMPLETED
        latest = store.load_latest_checkpoint(result.run_id)
        assert latest is not None
        for seq in range(1, latest.seq + 1):
            checkpoint = store.load_checkpoint(result.run_id, seq)
            assert checkpoint is not None
            if not checkpoint.cursor:
                continue
            wave = checkpoint.cursor[0].continuation.get("wave")
            if wave is None:
                continue
            for index, member in wave["members"].items():
                step_id = IDS[int(index)]
                answers = sum(1 for item in checkpoint.transcript
                              if item.get("type") == "model-response"
                              and item.get("step_path") == step_id)
                assert answers == member.get("rounds", 0), (seq, step_id)


class GatedRenewals(SqliteRunStore):
    """Lease renewals that wait until the loop lets them go (or a hang deadline)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.renewing = threading.Event()
        self.release = threading.Event()
        self.renewed = threading.Event()

    def renew_lease(self, *args: Any, **kwargs: Any) -> Any:
        self.renewing.set()
        self.release.wait(GATE_DEADLINE)
        try:
            return super().renew_lease(*args, **kwargs)
        finally:
            self.renewed.set()


class WaitsForARenewal:
    """A model whose answer comes once it has seen a lease renewal in flight, and
    which then lets the renewal end: only possible when the renewal is not
    holding the loop this model runs on."""

    def __init__(self, store: GatedRenewals) -> None:
        self.store = store
        self.saw_renewal_in_flight = False

    async def generate(self, request: ModelRequest, *,
                       on_text: TextListener | None = None) -> ModelResponse:
        deadline = time.monotonic() + HANG_DEADLINE
        while not self.store.renewing.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        self.saw_renewal_in_flight = self.store.renewing.is_set() \
            and not self.store.renewed.is_set()
        self.store.release.set()
        return ModelResponse(text="done")


def test_a_lease_renewal_in_flight_does_not_hold_the_model_call(tmp_path: Path) -> None:
    store = GatedRenewals(tmp_path / "runs.sqlite")
    model = WaitsForARenewal(store)
    # A short lease: the heartbeat renews it 50 ms into the model call.
    runtime = AgentRuntime(store=store, models={"slow": model}, lease_seconds=0.15)
    with store:
        result = runtime.run_sync(manifest=manifest({"id": "ask", "type": "prompt",
                                                     "prompt": "hi"}),
                                  options={"model": "slow/any"})
    assert result.status is RunStatus.COMPLETED
    assert model.saw_renewal_in_flight


class RecordsItsThreads(MemoryRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self.threads.add(threading.current_thread().name)
        super().save_checkpoint(*args, **kwargs)


class WaitsLikeADisk(RecordsItsThreads):
    waits_on_io = True


@pytest.mark.parametrize(("store_type", "off_loop"),
                         [(RecordsItsThreads, False), (WaitsLikeADisk, True)])
def test_a_store_that_never_waits_on_io_is_called_on_the_loop_thread(
        store_type: type[RecordsItsThreads], off_loop: bool) -> None:
    """The memory store says its calls never wait (`waits_on_io = False`): they stay
    on the loop thread, where a hop would cost more than the call. A store that
    waits, as every store does unless it says otherwise, is called off the loop."""
    store = store_type()
    runtime = AgentRuntime(store=store)
    result = runtime.run_sync(manifest=manifest(
        {"id": "one", "type": "prompt", "prompt": "a"},
        {"id": "two", "type": "prompt", "prompt": "b"}), options={"model": "scripted/echo"})
    assert result.status is RunStatus.COMPLETED
    assert store.threads
    assert all(name.startswith(THREAD_NAME) == off_loop for name in store.threads)


def test_a_resume_reaches_its_first_step_in_two_trips_to_the_store_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each store call is a trip to the store thread and back, which a loaded server
    pays in queueing too: a resume reads the run with its latest checkpoint in one
    trip, and reserves the attempt and reads what it starts from (checkpoint,
    effects) in a second; a one-step run then ends in a third."""
    store = WaitsLikeADisk()
    runtime = AgentRuntime(store=store)
    record, _ = runtime.new_run(manifest=manifest({"id": "one", "type": "prompt",
                                                   "prompt": "a"}),
                                options={"model": "scripted/echo"})
    store.create_run(record)
    trips: list[str] = []
    call = StoreThread.call

    async def counted(self: StoreThread, function: Any, *args: Any, **kwargs: Any) -> Any:
        trips.append(getattr(function, "__name__", repr(function)))
        return await call(self, function, *args, **kwargs)

    monkeypatch.setattr(StoreThread, "call", counted)
    result = runtime.run_sync(run_id=record.run_id, resume=True)
    assert result.status is RunStatus.COMPLETED
    assert trips == ["run_and_latest", "reserve_attempt", "complete_run"]


def test_serve_starts_a_run_in_two_trips_to_the_store_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`serve`'s launcher reads the run with its latest checkpoint itself (it builds
    the run's runtime from the record) and hands both to the engine, which then
    only reserves the attempt: a started run reaches its step in two trips, ends
    in a third."""
    pool = StorePool(2)
    trips: list[str] = []
    call = StoreThread.call

    async def counted(self: StoreThread, function: Any, *args: Any, **kwargs: Any) -> Any:
        trips.append(getattr(function, "__name__", repr(function)))
        return await call(self, function, *args, **kwargs)

    with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        def runtime_for(record: RunRecord | None) -> AgentRuntime:
            return AgentRuntime(store=store, store_pool=pool)

        launcher = LocalLauncher(store, runtime_for, store_pool=pool)
        try:
            record = runtime_for(None).create_run(
                manifest=manifest({"id": "one", "type": "prompt", "prompt": "a"}),
                options={"model": "scripted/echo"})
            monkeypatch.setattr(StoreThread, "call", counted)
            launcher.start(record)
            assert launcher.wait(HANG_DEADLINE) == []
        finally:
            launcher.shutdown(timeout=HANG_DEADLINE)
            pool.shutdown()
        finished = store.load_run(record.run_id)
    assert finished is not None and finished.status is RunStatus.COMPLETED
    assert trips == ["_run_and_latest", "reserve_attempt", "complete_run"]


# -- the store thread itself ---------------------------------------------------------


def test_calls_run_in_order_on_one_thread_off_the_loop() -> None:
    calls: list[tuple[int, str]] = []

    def record(n: int) -> int:
        time.sleep(0.001 * (5 - n))  # later calls would overtake on a pool of threads
        calls.append((n, threading.current_thread().name))
        return n * 10

    async def main() -> list[int]:
        store_thread = StoreThread()
        with store_thread.held():
            return list(await asyncio.gather(*(store_thread.call(record, n)
                                               for n in range(5))))

    assert asyncio.run(main()) == [0, 10, 20, 30, 40]
    assert [n for n, _ in calls] == [0, 1, 2, 3, 4]
    assert len({name for _, name in calls}) == 1
    assert calls[0][1].startswith(THREAD_NAME)


def test_a_store_error_reaches_the_caller_as_raised() -> None:
    refusal = StaleAttempt("attempt 2 is no longer the run's")

    def refuse() -> None:
        raise refusal

    async def main() -> None:
        await StoreThread().call(refuse)

    with pytest.raises(StaleAttempt) as raised:
        asyncio.run(main())
    assert raised.value is refusal


def test_a_cancelled_caller_waits_for_its_call_in_flight_and_drops_a_queued_one() -> None:
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def slow() -> None:
        started.set()
        release.wait(HANG_DEADLINE)
        ran.append("slow")

    def queued() -> None:
        ran.append("queued")

    async def main() -> None:
        store_thread = StoreThread()
        with store_thread.held():
            in_flight = asyncio.create_task(store_thread.call(slow))
            behind = asyncio.create_task(store_thread.call(queued))
            while not started.is_set():
                await asyncio.sleep(0.001)
            in_flight.cancel()
            behind.cancel()
            await asyncio.sleep(0.01)
            # The call that started cannot be taken back: its caller waits for it.
            assert not in_flight.done()
            assert behind.cancelled()
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await in_flight
        assert ran == ["slow"]

    asyncio.run(main())


def _store_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name.startswith(THREAD_NAME)}


def _until_gone(threads: set[threading.Thread]) -> set[threading.Thread]:
    deadline = time.monotonic() + HANG_DEADLINE
    while any(thread.is_alive() for thread in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    return {thread for thread in threads if thread.is_alive()}


class CountsStoreThreads:
    """A model that answers at once and notes how many store threads are alive."""

    def __init__(self, before: set[threading.Thread]) -> None:
        self.before = before
        self.peak = 0
        self._lock = threading.Lock()

    async def generate(self, request: ModelRequest, *,
                       on_text: TextListener | None = None) -> ModelResponse:
        alive = len(_store_threads() - self.before)
        with self._lock:
            self.peak = max(self.peak, alive)
        await asyncio.sleep(0.01)
        return ModelResponse(text="done")


def test_one_store_thread_for_concurrent_runs_and_none_once_they_end(tmp_path: Path) -> None:
    before = _store_threads()
    model = CountsStoreThreads(before)
    with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        runtime = AgentRuntime(store=store, models={"count": model})
        agent = manifest({"id": "ask", "type": "prompt", "prompt": "hi"})

        async def many() -> list[Any]:
            return list(await asyncio.gather(*(runtime.run(manifest=agent,
                                                           options={"model": "count/any"})
                                               for _ in range(8))))

        results = asyncio.run(many())
    assert all(result.status is RunStatus.COMPLETED for result in results)
    assert model.peak == 1
    assert not runtime.store_thread.running
    assert _until_gone(_store_threads() - before) == set()


def test_serve_runs_share_the_store_pool_however_many_execute(tmp_path: Path) -> None:
    """`serve` builds a runtime per attempt, all over one `StorePool`: at most its
    threads make store calls, however many runs execute at once, and none is left
    once the pool is shut down."""
    before = _store_threads()
    model = CountsStoreThreads(before)
    pool = StorePool(2)
    with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        def runtime_for(record: RunRecord | None) -> AgentRuntime:
            return AgentRuntime(store=store, models={"count": model}, store_pool=pool)

        agent = manifest({"id": "ask", "type": "prompt", "prompt": "hi"})
        launcher = LocalLauncher(store, runtime_for, store_pool=pool)
        try:
            run_ids = []
            for _ in range(12):
                record = runtime_for(None).create_run(manifest=agent,
                                                      options={"model": "count/any"})
                launcher.start(record)
                run_ids.append(record.run_id)
            assert launcher.wait(HANG_DEADLINE) == []
        finally:
            launcher.shutdown(timeout=HANG_DEADLINE)
            pool.shutdown()
        records = [store.load_run(run_id) for run_id in run_ids]
    assert all(record is not None and record.status is RunStatus.COMPLETED
               for record in records)
    assert 1 <= model.peak <= 2
    assert _until_gone(_store_threads() - before) == set()
