"""End-to-end cost per loop iteration: our engine against its floor and two peers, in one run.

The workload is the issue's: a collection loop of N iterations with one
prompt step per iteration, answered by the scripted model (no network), in
two variants: `plain` (one model request per iteration) and `tool` (the model
asks for one Python tool call, then answers: two requests and one effect per
iteration). Subjects:

- `engine`: our engine on the in-memory store (no I/O): the engine's own cost;
- `sqlite`: our engine on `SqliteRunStore` (WAL, synchronous=FULL);
- `sqlite_normal`: the same at synchronous=NORMAL, which makes no fsync per
  commit: over `engine` it is the store's own CPU, and `sqlite` over it is
  what our commits' fsyncs cost, to set beside the floor's whole commit;
- `floor`: raw SQLite doing the same commits with the same bytes as `sqlite`
  did (captured from its connection), one INSERT per commit, nothing else;
- `busy_floor`: the floor's commits, each after busy-waiting the engine's own
  time per commit (an fsync after CPU work costs more than one back to back
  on a virtual disk): what is left of `sqlite` over it is the store's cost;
- `langgraph`: LangGraph's `SqliteSaver`, a graph whose node runs once per
  iteration (two nodes for `tool`) appending the same-sized transcript entry;
- `dbos`: DBOS on SQLite, a workflow with one step per iteration (two for
  `tool`). The two peers' loops are in bench/engine_peers.py;
- `baseline` (with `--baseline REV`): the `engine` subject on the code of git
  revision REV (exported to a temporary directory and imported from there),
  so an earlier engine's figure and this tree's come from the same run, on
  the same machine under the same load; `engine / baseline` is their ratio.

Each run's clock starts after its process parsed one small manifest of the
same step kinds: pydantic builds a step kind's validators the first time a
process validates one, tens of milliseconds once in a process's life, which
would otherwise count as tens of microseconds per iteration at N=1,000. The
peers build their graph or launch before their clocks start too. The run
still parses its own manifest on the clock.

Each measurement runs in a fresh child process (so peak RSS is its own and
no import or cache state leaks between subjects). Rounds are block-paired:
every round measures every subject once, in a rotating order, and the ratios
are taken within a round, then the median over rounds is printed, so load
drift on a shared machine cancels out of the ratios.

Two printed ratios have no target. `sqlite / busy_floor` is what the store
adds. `(engine + floor) / floor` is about the least `sqlite / floor` can be
on any disk: each commit must be durable before the next model or tool call,
so the engine's work and the floor's commits run in series, and the store's
own work only adds to that sum. (It is "about" because `engine` includes the
in-memory store's own work, which is small next to SQLite's.) `busy_floor`
also pays this disk's extra for an fsync after CPU work, so here it is the
tighter bound of the two.

The `per commit` lines split what `sqlite` adds past the engine: the store's
own CPU (`sqlite_normal - engine`) and our fsync (`sqlite - sqlite_normal`),
which here costs more than the floor's whole commit: it follows the
interpreter's work rather than another commit.

    python bench/engine_overhead.py [--sizes 100,1000,5000] [--rounds 3]
        [--variants plain,tool] [--subjects engine,sqlite,sqlite_normal,floor,...]
        [--baseline REV]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, overload

from engine_peers import ENTRY_TEXT, measure_dbos, measure_langgraph
from revisions import export_revision
from sqlite_floor import CommitLog, replay_commits, stored_bytes, written_by_sqlite

SUBJECTS = ("engine", "sqlite", "sqlite_normal", "floor", "busy_floor", "langgraph", "dbos")
BASELINE = "baseline"  # the `engine` subject on another revision's code (--baseline)
ROOT = Path(__file__).resolve().parent.parent
# Where each subject's child imports the runtime from: this tree, unless told.
_TREES: dict[str, Path] = {}
# Per-iteration targets of the `engine` subject at N=1,000, in microseconds.
ENGINE_TARGETS = {"plain": 150, "tool": 500}


# -- our engine ----------------------------------------------------------------


def _manifest(size: int, variant: str) -> dict[str, Any]:
    ask: dict[str, Any] = {"id": "ask", "type": "prompt", "prompt": "Handle item {{ item }}."}
    if variant == "tool":
        ask["tools"] = ["lookup"]
    return {"schemaVersion": "1.0", "id": "bench-loop", "name": "bench loop",
            "model": {"provider": "scripted", "model": "bench"},
            "variables": [{"key": "items", "type": "array", "value": list(range(size))}],
            "limits": {"maxToolCallsPerIteration": 2},
            "steps": [{"id": "each", "type": "loop", "outputVariable": "handled",
                       "loop": {"source": "items", "itemVariable": "item",
                                "outputMode": "array"},
                       "steps": [ask]}]}


def _runtime(store: Any, size: int, variant: str) -> Any:
    from agent_runtime import tool
    from agent_runtime.engine import AgentRuntime
    from agent_runtime.models.scripted import Script

    @tool
    def lookup(item: int) -> dict[str, object]:
        """Look an item up.

        Args:
            item: The item.
        """
        return {"item": item, "text": ENTRY_TEXT}

    runtime = AgentRuntime(store=store, tools=[lookup])
    entries = _Entries(size, variant)
    runtime.scripted.add_script("bench", Script(by_step={"ask": entries}))  # type: ignore[dict-item]
    # The scripted model keeps every request it is sent, for tests to inspect;
    # a real provider keeps none. Kept here, they would be most of what grows
    # with N besides the run's own state (each holds its resolved messages),
    # measuring the test double rather than the runtime.
    runtime.scripted.requests = _Unlogged()
    return runtime


class _Entries(Sequence[dict[str, Any]]):
    """The script's entries, each made when the model is asked for it.

    A real provider holds no script: a list of every answer would grow with N
    and count the test double in the runtime's peak RSS."""

    USAGE: ClassVar[dict[str, int]] = {"inputTokens": 40, "outputTokens": 20}

    def __init__(self, size: int, variant: str) -> None:
        self._per_iteration = 2 if variant == "tool" else 1
        self._size = size

    def __len__(self) -> int:
        return self._size * self._per_iteration

    @overload
    def __getitem__(self, position: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, position: slice) -> Sequence[dict[str, Any]]: ...

    def __getitem__(self, position: int | slice) -> Any:
        if isinstance(position, slice):
            return [self[index] for index in range(*position.indices(len(self)))]
        if not 0 <= position < len(self):
            raise IndexError(position)
        index, part = divmod(position, self._per_iteration)
        if part == 0 and self._per_iteration == 2:
            return {"toolCalls": [{"name": "lookup", "arguments": {"item": index}}],
                    "usage": self.USAGE}
        return {"text": ENTRY_TEXT, "usage": self.USAGE}


class _Unlogged(list[Any]):
    """A request log that keeps nothing (see `_runtime`)."""

    def append(self, _request: Any) -> None:
        return None


def _run_engine(store: Any, size: int, variant: str) -> float:
    from agent_runtime.manifest import parse_agent_manifest

    runtime = _runtime(store, size, variant)
    manifest = _manifest(size, variant)
    # A process builds the validators of the manifest's step kinds the first time
    # it parses one (pydantic builds them lazily): once in a process's life, tens
    # of milliseconds, not per iteration. The peers build their graph or launch
    # before their clocks start too. The run below still parses its own manifest.
    parse_agent_manifest(_manifest(1, variant), source="manifest")
    # Started, as every process that hosts runs settles its startup heap before
    # its first run (agent_runtime/startup_heap.py: the CLI, serve, each Lambda
    # handler): the collector's first full walk of the imported modules is the
    # process's, not the iterations'. `gc.freeze` itself, so that a baseline
    # tree without that module is measured the same way.
    gc.freeze()
    started = time.perf_counter()
    result = asyncio.run(runtime.run(manifest=manifest))
    elapsed = time.perf_counter() - started
    if result.status.value != "completed":
        raise SystemExit(f"bench run ended {result.status.value}: {result.error}")
    return elapsed


def measure_engine(size: int, variant: str, _directory: Path) -> dict[str, Any]:
    from stores.memory import MemoryRunStore

    elapsed = _run_engine(MemoryRunStore(), size, variant)
    return {"seconds": elapsed}


def measure_sqlite(size: int, variant: str, directory: Path) -> dict[str, Any]:
    written = _run_on_sqlite(size, variant, directory / "ours.sqlite", "FULL")
    (directory / "commits.json").write_text(json.dumps(
        {"bytes": written["bytes"], "commits": written["commits"]}))
    return written


def measure_sqlite_normal(size: int, variant: str, directory: Path) -> dict[str, Any]:
    return _run_on_sqlite(size, variant, directory / "ours-normal.sqlite", "NORMAL")


def _run_on_sqlite(size: int, variant: str, path: Path, synchronous: str) -> dict[str, Any]:
    from stores.sqlite import SqliteRunStore

    log = CommitLog()
    with SqliteRunStore(path, synchronous=synchronous) as store:
        # The bench reads the store's own connection to learn what the floor must write.
        store._conn.set_trace_callback(log.trace)
        elapsed = _run_engine(store, size, variant)
    return {"seconds": elapsed, "bytes": stored_bytes(path), "commits": log.commits}


def measure_floor(_size: int, _variant: str, directory: Path) -> dict[str, Any]:
    """The same commits with the same bytes, back to back."""
    return replay_commits(directory, "floor.sqlite", written_by_sqlite(directory))


def measure_busy_floor(size: int, variant: str, directory: Path) -> dict[str, Any]:
    """The floor's commits, each after the engine's own CPU per commit (busy-waited).

    On a virtual disk an fsync issued after a stretch of CPU work takes longer
    than one issued back to back (the host's I/O path goes idle between them),
    so the bare floor is a bound no workload with work between its commits can
    reach. This is the least a runtime doing our engine's work can take here:
    `sqlite` over it is what the store and the commits' placement cost."""
    from stores.memory import MemoryRunStore

    written = written_by_sqlite(directory)
    engine = _run_engine(MemoryRunStore(), size, variant)
    return replay_commits(directory, "busy-floor.sqlite", written,
                           work_seconds=engine / max(1, written["commits"]))


MEASURES = {"engine": measure_engine, BASELINE: measure_engine, "sqlite": measure_sqlite,
            "sqlite_normal": measure_sqlite_normal, "floor": measure_floor,
            "busy_floor": measure_busy_floor, "langgraph": measure_langgraph,
            "dbos": measure_dbos}


def child(subject: str, size: int, variant: str, directory: str) -> None:
    """One measurement in this (fresh) process; prints one JSON line."""
    found = MEASURES[subject](size, variant, Path(directory))
    if found is not None:
        found["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(found))


# -- the parent: rounds, ratios, report ---------------------------------------------


def _measure(subject: str, size: int, variant: str, directory: Path) -> dict[str, Any] | None:
    command = [sys.executable, __file__, "--child", subject, str(size), variant, str(directory)]
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(_TREES.get(subject, ROOT))})
    if done.returncode != 0:
        raise SystemExit(f"{subject} N={size} {variant} failed:\n{done.stderr[-2000:]}")
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "null"
    result: dict[str, Any] | None = json.loads(last)
    return result


_REPLAYS = ("floor", "busy_floor")  # subjects that replay `sqlite`'s commits


def one_round(size: int, variant: str, subjects: list[str], turn: int
              ) -> dict[str, dict[str, Any]]:
    """Every subject once; the floors right after `sqlite`, whose commits they replay."""
    order = [s for s in subjects if s not in _REPLAYS]
    order = order[turn % len(order):] + order[:turn % len(order)]
    after = order.index("sqlite") + 1 if "sqlite" in order else 0
    order[after:after] = [s for s in _REPLAYS if s in subjects]
    found: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="agent-runtime-engine-bench-") as directory:
        for subject in order:
            measured = _measure(subject, size, variant, Path(directory))
            if measured is not None:
                found[subject] = measured
    return found


def _median(rounds: list[dict[str, dict[str, Any]]], subject: str, key: str) -> float | None:
    values = [r[subject][key] for r in rounds if subject in r and key in r[subject]]
    return statistics.median(values) if values else None


def _ratio(rounds: list[dict[str, dict[str, Any]]], top: str, bottom: str) -> float | None:
    values = [r[top]["seconds"] / r[bottom]["seconds"] for r in rounds
              if top in r and bottom in r]
    return statistics.median(values) if values else None


def _serial_bound(rounds: list[dict[str, dict[str, Any]]]) -> float | None:
    values = [(r["engine"]["seconds"] + r["floor"]["seconds"]) / r["floor"]["seconds"]
              for r in rounds if "engine" in r and "floor" in r]
    return statistics.median(values) if values else None


def _per_commit(rounds: list[dict[str, dict[str, Any]]], top: str, bottom: str
                ) -> float | None:
    """Median over rounds of (`top` - `bottom`) seconds per `sqlite` commit, in us."""
    values = [(r[top]["seconds"] - r[bottom]["seconds"]) / r["sqlite"]["commits"] * 1e6
              for r in rounds if top in r and bottom in r and r.get("sqlite", {}).get("commits")]
    return statistics.median(values) if values else None


def report(size: int, variant: str, rounds: list[dict[str, dict[str, Any]]], *,
           subjects: list[str], smallest: dict[str, float],
           peaks: dict[str, dict[int, float]], revision: str | None = None) -> None:
    steps = size * (2 if variant == "tool" else 1)
    print(f"\nN={size} iterations, variant={variant} ({steps} model requests), "
          f"median of {len(rounds)} block-paired rounds")
    for subject in subjects:
        seconds = _median(rounds, subject, "seconds")
        if seconds is None:
            print(f"  {subject:13s} not installed (pip install -e '.[bench]')")
            continue
        rss = _median(rounds, subject, "peak_rss_kib") or 0
        line = (f"  {subject:13s} {seconds / size * 1e6:10.1f} us/iteration"
                f"  peak RSS {rss / 1024:7.1f} MiB")
        if subject == "engine" and size == 1000 and variant in ENGINE_TARGETS:
            line += f"  (target <= {ENGINE_TARGETS[variant]} us)"
        elif subject == BASELINE and revision:
            line += f"  (the engine at {revision})"
        written = _median(rounds, subject, "bytes")
        if written is not None:
            commits = _median(rounds, subject, "commits") or 0
            line += (f"  {written / size:8.0f} bytes/iteration"
                     f"  {commits / size:4.1f} commits/iteration")
        print(line)
    for top, bottom, target in (("engine", BASELINE, "(no target: this tree against the "
                                                     "baseline revision)"),
                                ("sqlite", "floor", "(target <= 2)"),
                                ("sqlite", "busy_floor", "(no target: what the store adds)"),
                                ("sqlite", "langgraph", "(target <= 0.25)"),
                                ("sqlite", "dbos", "(target <= 0.25)")):
        ratio = _ratio(rounds, top, bottom)
        if ratio is not None:
            print(f"  ratio {top} / {bottom:10s} {ratio:6.2f}  {target}")
    serial = _serial_bound(rounds)
    if serial is not None:
        # Each commit must be durable before the next model or tool call, so the
        # engine's own time cannot overlap the fsync: sqlite / floor cannot go much
        # below this, whatever the store does (its own CPU and I/O come on top).
        print(f"  ratio (engine + floor) / floor {serial:6.2f}  (no target: the two in series)")
    store_cpu = _per_commit(rounds, "sqlite_normal", "engine")
    fsync = _per_commit(rounds, "sqlite", "sqlite_normal")
    sqlite_commits = _median(rounds, "sqlite", "commits")
    floor_seconds = _median(rounds, "floor", "seconds")
    if store_cpu is not None and fsync is not None and sqlite_commits \
            and floor_seconds is not None:
        # Where an iteration's time goes past the engine's own: the store's CPU,
        # then each fsync, against the floor's whole commit (its INSERT included).
        print(f"  per commit: store CPU {store_cpu:6.1f} us (sqlite_normal - engine),"
              f" our fsync {fsync:6.1f} us (sqlite - sqlite_normal)")
        floor_commit = floor_seconds / sqlite_commits * 1e6
        print(f"              the floor's whole commit {floor_commit:6.1f} us"
              " (no target: an fsync after our work against one back to back)")
    engine = _median(rounds, "engine", "seconds")
    if engine is not None:
        per_iteration = engine / size
        first = smallest.setdefault(variant, per_iteration)
        print(f"  engine us/iteration vs the smallest N: {per_iteration / first:5.2f}x "
              "(target <= 1.25 at N=5,000)")
    peak = _median(rounds, "sqlite", "peak_rss_kib")
    if peak is not None:
        peaks.setdefault(variant, {})[size] = peak
        if size == 5000 and 1000 in peaks[variant]:
            print(f"  sqlite peak RSS at N=5,000 vs N=1,000: {peak / peaks[variant][1000]:5.2f}x "
                  "(target <= 1.5)")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default="plain,tool")
    parser.add_argument("--subjects", default=",".join(SUBJECTS))
    parser.add_argument("--baseline", metavar="REV",
                        help="also measure the engine on git revision REV's code (`baseline`)")
    args = parser.parse_args()
    subjects = [s for s in args.subjects.split(",") if s]
    unknown = sorted(set(subjects) - set(SUBJECTS))
    if unknown:
        parser.error(f"--subjects: unknown {', '.join(unknown)} (known: {', '.join(SUBJECTS)})")
    replaying = [s for s in _REPLAYS if s in subjects]
    if replaying and "sqlite" not in subjects:
        parser.error(f"--subjects: {', '.join(replaying)} replays sqlite's commits, "
                     "so it needs sqlite too")
    sizes = [int(size) for size in args.sizes.split(",")]
    smallest: dict[str, float] = {}
    peaks: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="agent-runtime-engine-baseline-") as exported:
        revision = None
        if args.baseline:
            revision = export_revision(args.baseline, Path(exported))
            _TREES[BASELINE] = Path(exported)
            subjects.insert(subjects.index("engine") + 1 if "engine" in subjects else 0,
                            BASELINE)
        for variant in args.variants.split(","):
            for size in sizes:
                rounds = [one_round(size, variant, subjects, turn)
                          for turn in range(args.rounds)]
                report(size, variant, rounds, subjects=subjects, smallest=smallest,
                       peaks=peaks, revision=revision)


if __name__ == "__main__":
    main()
