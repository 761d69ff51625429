"""Where the engine's time goes: a cProfile of one N-iteration loop run.

Runs the workload of bench/engine_overhead.py (a collection loop with one
scripted prompt step per iteration) once under cProfile and prints the
functions with the most time of their own (tottime), so the per-commit-point
constant can be cut by evidence rather than by guess.

    python bench/profile_engine.py [--size 5000] [--variant plain|tool]
        [--store memory|sqlite] [--top 15]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine_overhead import _run_engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=5000)
    parser.add_argument("--variant", choices=("plain", "tool"), default="plain")
    parser.add_argument("--store", choices=("memory", "sqlite"), default="sqlite")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    profiler = cProfile.Profile()
    with tempfile.TemporaryDirectory(prefix="agent-runtime-profile-") as directory:
        if args.store == "sqlite":
            from stores.sqlite import SqliteRunStore

            with SqliteRunStore(Path(directory) / "runs.sqlite", synchronous="FULL") as store:
                seconds = profiler.runcall(_run_engine, store, args.size, args.variant)
        else:
            from stores.memory import MemoryRunStore

            seconds = profiler.runcall(_run_engine, MemoryRunStore(), args.size, args.variant)
    print(f"N={args.size} variant={args.variant} store={args.store}: {seconds:.2f} s under "
          f"cProfile ({seconds / args.size * 1e6:.0f} us/iteration, inflated by the profiler)")
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())


if __name__ == "__main__":
    main()
