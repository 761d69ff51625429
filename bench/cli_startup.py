"""Start-up cost of the `agent-runtime` command, as a ratio to importing pydantic.

Every figure is the minimum wall time of N runs (7 by default) of a fresh
interpreter, measured in one run of this script against the same floor:
`python -c 'import pydantic'`, the least any pydantic-based tool pays. The
targets (issue 14): `--help` at most 1.5x that floor (the parser alone, no
engine), `validate` at most 3x (the manifest reader, no engine, providers
or HTTP client).

Each figure is given twice: wall time, which the targets are about, and the
CPU time (user + system) the process used, which a machine busy with other
work disturbs far less; on a quiet machine the two agree.

Every command runs once unmeasured first, with its bytecode written to a
cache in a temporary directory: an installed package is byte-compiled at
install, and a checkout run with PYTHONDONTWRITEBYTECODE would otherwise
compile every module of the package from source on every start.

    python bench/cli_startup.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "tests" / "fixtures" / "manifests" / "prompt-chain.agent.yaml"
TARGETS = {"--help": 1.5, "validate": 3.0}


def _bests(commands: dict[str, list[str]], runs: int,
           cwd: str) -> dict[str, tuple[float, float]]:
    """The least wall and CPU time of each command over `runs` rounds. A round runs
    every command once, so a machine busy for a while slows them all alike."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONPYCACHEPREFIX=str(Path(cwd) / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    def once(command: list[str]) -> tuple[float, float]:
        started, cpu_before = time.perf_counter(), cpu()
        subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return time.perf_counter() - started, cpu() - cpu_before

    for command in commands.values():
        once(command)  # writes the bytecode cache
    best = dict.fromkeys(commands, (float("inf"), float("inf")))
    for _ in range(runs):
        for name, command in commands.items():
            wall, used = once(command)
            best[name] = (min(best[name][0], wall), min(best[name][1], used))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "agent_runtime.cli"]
    with tempfile.TemporaryDirectory() as cwd:
        figures = _bests({"floor": [sys.executable, "-c", "import pydantic"],
                          "--help": [*cli, "--help"],
                          "validate": [*cli, "validate", str(MANIFEST)]}, args.runs, cwd)
    floor_wall, floor_cpu = figures.pop("floor")
    print(f"cli start-up, min of {args.runs} runs; floor `python -c 'import pydantic'` = "
          f"{floor_wall * 1000:.0f} ms wall, {floor_cpu * 1000:.0f} ms cpu")
    for name, (wall, used) in figures.items():
        ratio = wall / floor_wall
        verdict = "ok" if ratio <= TARGETS[name] else "over target"
        print(f"  agent-runtime {name:<9} {ratio:5.2f}x the floor "
              f"(target <= {TARGETS[name]:g}x: {verdict}); cpu {used / floor_cpu:5.2f}x")


if __name__ == "__main__":
    main()
