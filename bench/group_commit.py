"""Group commit on SQLite: commits/s of 100 runs checkpointing at once, shared vs alone.

100 runs, each owned by the bench, save checkpoints as fast as they can on one
`SqliteRunStore` at synchronous=FULL (a file in a temporary directory): each
save appends a ~200-byte transcript entry and a step result, as an engine's
iteration does, to a checkpoint made as the engine makes one. The runs save
as `serve`'s do: each is a coroutine on one event loop with a store thread of
its own, and all share a store pool of `serve`'s default size, so a save is
queued from the loop (`StoreThread.save_checkpoint`) and settled once its
transaction committed. Measured in the same run, on the same disk: with group
commit (saves that arrive while a transaction commits share the next one and
its fsync), with it disabled (`group_commit=False`: every save a transaction
and an fsync of its own, as before), and with group commit again but each run
saving on a thread of its own that waits for its commit (as a store's other
callers do: the CLI's runtime, the API's routes). After a short round of each
to warm up, rounds alternate the subjects; the median of each is printed with
the ratio, and the mean number of saves per transaction. Every save must
land: the bench checks each run's checkpoints afterwards and exits non-zero on
any error.

The ratio depends on the disk: a save costs the CPU of making it plus, alone,
an fsync; shared, a share of one. So the bench also prints what bounds it,
measured in the same run: the disk's fsync (a 4 KiB append, the median of
200), and the same saves at synchronous=NORMAL (WAL: no fsync at commit), the
rate the CPU alone allows, which group commit approaches as groups grow.

Threads that save are marked as ours (`stores.thread_placement`), as every
engine's store calls are made on its pools' threads: a group's leader wakes
its writers on its own CPU.

The cycle collector is set as `serve` sets it once started: the startup heap
frozen, a young collection every `YOUNG_COLLECTION_EVERY` net allocations
(agent_runtime/api/collector_pace.py). With Python's defaults, collections
took a tenth of the group commit subject's time, walking objects that live as
long as the process. The --baseline child is set the same way, so the
subjects differ in their store alone.

With `--baseline REV` the store of git revision REV (exported to a temporary
directory and imported from there, in a child process, which the bench
checks) makes the same saves in each round too, as that day's engine made
them (a thread per run, each save a transaction and an fsync of its own, on
the code of that day), and its ratio is printed: "today's" commits per second
of issue 34 measured in the same run, on the same disk.

    python bench/group_commit.py [--runs 100] [--saves 20] [--rounds 5] [--baseline REV]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from revisions import export_revision

from stores.records import (
    CONTRACT_VERSION,
    RUNTIME_VERSION,
    Checkpoint,
    CheckpointBudget,
    Frame,
    RunRecord,
    trusted_record,
)
from stores.sqlite import SqliteRunStore

# A --baseline tree from before the store pool saves on threads only.
with contextlib.suppress(ImportError):
    from agent_runtime.store_thread import StorePool, StoreThread

try:
    from stores.thread_placement import ours
except ImportError:  # a --baseline tree from before placement: nothing to place
    ours = contextlib.nullcontext  # type: ignore[assignment]

NOW = datetime(2026, 1, 1, tzinfo=UTC)
# A frame's fields a step at the top level leaves at their defaults.
_FRAME: dict[str, object] = {"loop_iteration": None, "child_index": None, "continuation": {},
          "continuation_version": 1}
TARGET = 5.0  # issue 34, acceptance 3
STORE_THREADS = 16  # `serve --store-threads`' default
THREADED = "group commit, threads"
# A checkpoint's event log (`events`) is newer than some --baseline trees' records.
_LATER_FIELDS: dict[str, object] = {"events": []} if "events" in Checkpoint.model_fields \
    else {}


def _saves(run_id: str, saves: int) -> Iterator[tuple[Checkpoint, datetime]]:
    """A run's checkpoints, in order, each with the lease its save renews."""
    transcript: list[dict[str, object]] = []
    results: list[dict[str, object]] = []
    for seq in range(1, saves + 1):
        transcript.append({"role": "assistant", "content": f"{seq:06d} " + "x" * 180})
        results.append({"step_id": f"s{seq}", "output": seq})
        yield _checkpoint(run_id, seq, results, transcript), NOW + timedelta(seconds=600 + seq)


def _owner(store: SqliteRunStore, run_id: str, saves: int, start: threading.Barrier,
           errors: list[str]) -> None:
    """A run saving on a thread of its own, which waits for each commit."""
    start.wait()
    try:
        with ours():  # an engine's store calls are made on its pool's threads
            for checkpoint, lease in _saves(run_id, saves):
                store.save_checkpoint(checkpoint, expected_attempt=1, lease_expires_at=lease)
    except Exception as error:  # a bench counts every failure, whatever its kind
        errors.append(f"{run_id}: {type(error).__name__}: {error}")


async def _run(store: SqliteRunStore, lane: StoreThread, run_id: str, saves: int,
               errors: list[str]) -> None:
    """A run saving as `serve`'s do: from the event loop, through its store thread."""
    try:
        for checkpoint, lease in _saves(run_id, saves):
            await lane.save_checkpoint(store, checkpoint, expected_attempt=1,
                                       lease_expires_at=lease)
    except Exception as error:  # a bench counts every failure, whatever its kind
        errors.append(f"{run_id}: {type(error).__name__}: {error}")


def _save_on_loop(store: SqliteRunStore, ids: list[str], saves: int,
                  errors: list[str]) -> float:
    """The seconds `ids` took to save `saves` checkpoints each as coroutines of one loop."""
    pool = StorePool(STORE_THREADS)

    async def all_runs() -> float:
        lanes = [StoreThread(pool=pool) for _ in ids]
        started = time.perf_counter()
        await asyncio.gather(*(_run(store, lane, run_id, saves, errors)
                               for lane, run_id in zip(lanes, ids, strict=True)))
        return time.perf_counter() - started

    try:
        return asyncio.run(all_runs())
    finally:
        pool.shutdown()


def _save_on_threads(store: SqliteRunStore, ids: list[str], saves: int,
                     errors: list[str]) -> float:
    """The seconds `ids` took to save `saves` checkpoints each, a thread per run."""
    start = threading.Barrier(len(ids) + 1)
    owners = [threading.Thread(target=_owner, args=(store, run_id, saves, start, errors))
              for run_id in ids]
    for owner in owners:
        owner.start()
    start.wait()
    started = time.perf_counter()
    for owner in owners:
        owner.join()
    return time.perf_counter() - started


def _checkpoint(run_id: str, seq: int, results: list[dict[str, object]],
                transcript: list[dict[str, object]]) -> Checkpoint:
    """Checkpoint `seq` as the engine makes one (`RunState.to_checkpoint`): its fields
    already valid, so not validated again, and its append-only lists shared, not
    copied. Validating them instead would make the bench's own CPU per save, not
    the store's, bound the rate once the fsync is shared."""
    return trusted_record(Checkpoint, {
        "run_id": run_id, "seq": seq, "attempt": 1, "manifest_hash": "sha256:bench",
        "contract_version": CONTRACT_VERSION, "runtime_version": RUNTIME_VERSION,
        "cursor": [trusted_record(Frame, {**_FRAME, "step_path": f"s{seq}",
                                          "step_id": f"s{seq}", "step_index": seq})],
        "variables": {"step": seq}, "step_results": results, "transcript": transcript,
        "artifacts": [], **_LATER_FIELDS,
        "budget": trusted_record(CheckpointBudget, {"max_total_tokens": None,
                                                    "consumed_tokens": seq}),
        "created_at": NOW + timedelta(milliseconds=seq)})


def measure(directory: Path, *, grouped: bool | None, synchronous: str, runs: int,
            saves: int, on_loop: bool) -> tuple[float, float]:
    """(commits per second, saves per transaction) of `runs` owners saving at once, as
    coroutines of one loop or a thread each; `grouped` None for a store that
    predates group commit (a --baseline tree's: a transaction per save)."""
    path = directory / f"runs-{time.monotonic_ns()}.sqlite"
    options = {} if grouped is None else {"group_commit": grouped}
    with SqliteRunStore(path, synchronous=synchronous, **options) as store:
        ids = [f"run-{index:04d}" for index in range(runs)]
        for run_id in ids:
            store.create_run(RunRecord(run_id=run_id, manifest_hash="sha256:bench"))
            store.resume_run(run_id, owner="bench", now=NOW, lease_seconds=600)
        errors: list[str] = []
        before = 0 if grouped is None else store._commits.transactions
        save = _save_on_loop if on_loop else _save_on_threads
        elapsed = save(store, ids, saves, errors)
        transactions = runs * saves if grouped is None else store._commits.transactions - before
        for run_id in ids:
            run = store.load_run(run_id)
            if run is None or run.checkpoint_seq != saves:
                errors.append(f"{run_id}: {saves} saves, checkpoint_seq "
                              f"{None if run is None else run.checkpoint_seq}")
        if errors:
            raise SystemExit("saves failed:\n" + "\n".join(errors[:10]))
    return runs * saves / elapsed, runs * saves / max(transactions, 1)


def collect_as_serve(young: int) -> None:
    """The cycle collector as `serve` sets it once started (agent_runtime/cli/serve.py):
    every object alive now frozen, a young collection every `young` net allocations.
    Made with `gc` itself, not serve's functions, so a --baseline tree from before
    them is measured the same way."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)


def measure_revision(tree: Path, directory: Path, *, runs: int, saves: int, young: int
                     ) -> tuple[float, float]:
    """`measure` of the store in `tree` (an exported revision), in a child process
    that imports it from there."""
    done = subprocess.run([sys.executable, __file__, "--runs", str(runs), "--saves", str(saves),
                           "--measure-here", str(directory), "--young-collection", str(young)],
                          env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the --baseline store failed:\n{done.stderr[-2000:]}")
    rate, size, imported = json.loads(done.stdout.splitlines()[-1])
    if not Path(imported).resolve().is_relative_to(tree.resolve()):
        # An editable install ahead of PYTHONPATH would measure this tree twice.
        raise SystemExit(f"the --baseline child imported its store from {imported}, "
                         f"not from the exported tree {tree}")
    return float(rate), float(size)


def fsync_micros(directory: Path, count: int = 200) -> float:
    """The median time of appending 4 KiB to a file and fsyncing it, in microseconds."""
    path = directory / "fsync.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        times = []
        for _ in range(count):
            started = time.perf_counter()
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times) * 1e6


# (label, group commit, synchronous, saved from the loop); group commit None: the
# --baseline revision's store, a thread per run.
Subject = tuple[str, bool | None, str, bool]
SUBJECTS: tuple[Subject, ...] = (
    ("one commit each", False, "FULL", True), ("group commit", True, "FULL", True),
    (THREADED, True, "FULL", False), ("no fsync (NORMAL)", True, "NORMAL", True))
BASELINE = "--baseline store"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--saves", type=int, default=20, help="checkpoints per run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", metavar="REV",
                        help="also measure the store of git revision REV (today's, before "
                             "group commit)")
    # The child of --baseline: one measurement of the store it imports, in this directory.
    parser.add_argument("--measure-here", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--young-collection", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.runs, args.saves, args.rounds) < 1:
        parser.error("--runs, --saves and --rounds must be at least 1")
    if args.measure_here is not None:
        if args.young_collection is None:
            parser.error("--measure-here needs --young-collection")
        collect_as_serve(args.young_collection)
        # Warmed up as this process is before its rounds: a fresh process's first
        # saves would make the baseline look slower than it is.
        measure(args.measure_here, grouped=None, synchronous="FULL", runs=args.runs, saves=2,
                on_loop=False)
        rate, size = measure(args.measure_here, grouped=None, synchronous="FULL",
                             runs=args.runs, saves=args.saves, on_loop=False)
        print(json.dumps([rate, size, sys.modules[SqliteRunStore.__module__].__file__]))
        return
    from agent_runtime.api.collector_pace import YOUNG_COLLECTION_EVERY

    collect_as_serve(YOUNG_COLLECTION_EVERY)
    with tempfile.TemporaryDirectory(prefix="agent-runtime-group-commit-") as directory, \
            tempfile.TemporaryDirectory(prefix="agent-runtime-group-commit-tree-") as tree:
        subjects = SUBJECTS
        revision = None
        if args.baseline:
            revision = export_revision(args.baseline, Path(tree))
            subjects = ((BASELINE, None, "FULL", False), *SUBJECTS)
        print(f"group commit: {args.runs} runs saving {args.saves} checkpoints each at once,"
              f" one SqliteRunStore, median of {args.rounds} rounds")

        def one(grouped: bool | None, synchronous: str, on_loop: bool, saves: int
                ) -> tuple[float, float]:
            if grouped is None:
                return measure_revision(Path(tree), Path(directory), runs=args.runs,
                                        saves=saves, young=YOUNG_COLLECTION_EVERY)
            return measure(Path(directory), grouped=grouped, synchronous=synchronous,
                           runs=args.runs, saves=saves, on_loop=on_loop)

        rates: dict[str, list[float]] = {label: [] for label, *_ in subjects}
        sizes: dict[str, list[float]] = {label: [] for label, *_ in subjects}
        fsyncs: list[float] = []
        # Warm-up, not counted (the --baseline child, a fresh process each time,
        # warms itself up).
        for _, grouped, synchronous, on_loop in SUBJECTS:
            one(grouped, synchronous, on_loop, 2)
        for round_number in range(args.rounds):
            fsyncs.append(fsync_micros(Path(directory)))
            # Rotated, so no subject always runs first (or right after another).
            turn = round_number % len(subjects)
            for label, grouped, synchronous, on_loop in subjects[turn:] + subjects[:turn]:
                rate, size = one(grouped, synchronous, on_loop, args.saves)
                rates[label].append(rate)
                sizes[label].append(size)
    print(f"  fsync of a 4 KiB append on this disk: {statistics.median(fsyncs):7.0f} us")
    median = {label: statistics.median(found) for label, found in rates.items()}
    for label, _, synchronous, _ in subjects:
        print(f"  {label:22s} {median[label]:9.1f} commits/s  synchronous={synchronous:6s}"
              f" {statistics.median(sizes[label]):6.1f} saves per transaction")
    ratio = median["group commit"] / median["one commit each"]
    print(f"  ratio group commit / one commit each {ratio:6.2f}  (target >= {TARGET:g})")
    if revision is not None:
        today = median["group commit"] / median[BASELINE]
        print(f"  ratio group commit / the store at {revision} {today:6.2f}  (target >= "
              f"{TARGET:g}: today's commits per second, issue 34)")
    print(f"  group commit reaches {median['group commit'] / median['no fsync (NORMAL)']:.0%}"
          " of the rate without fsync")


if __name__ == "__main__":
    main()
