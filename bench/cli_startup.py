"""Start-up cost of the `agent-runtime` command, as a ratio to importing pydantic.

Every figure is the minimum wall time of N runs (7 by default) of a fresh
interpreter, measured in one run of this script against the same floor:
`python -c 'import pydantic'`, the least any pydantic-based tool pays. The
targets (issue 14): `--help` at most 1.5x that floor (the parser alone, no
engine), `validate` at most 3x (the manifest reader, no engine, providers
or HTTP client).

Every command runs once unmeasured first, with its bytecode written to a
cache in a temporary directory: an installed package is byte-compiled at
install, and a checkout run with PYTHONDONTWRITEBYTECODE would otherwise
compile every module of the package from source on every start.

    python bench/cli_startup.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "tests" / "fixtures" / "manifests" / "prompt-chain.agent.yaml"
TARGETS = {"--help": 1.5, "validate": 3.0}


def _bests(commands: dict[str, list[str]], runs: int, cwd: str) -> dict[str, float]:
    """The least wall time of each command over `runs` rounds. A round runs every
    command once, so a machine busy for a while slows them all alike."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONPYCACHEPREFIX=str(Path(cwd) / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)

    def once(command: list[str]) -> float:
        started = time.perf_counter()
        subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return time.perf_counter() - started

    for command in commands.values():
        once(command)  # writes the bytecode cache
    best = dict.fromkeys(commands, float("inf"))
    for _ in range(runs):
        for name, command in commands.items():
            best[name] = min(best[name], once(command))
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
    floor = figures.pop("floor")
    print(f"cli start-up, min of {args.runs} runs; floor `python -c 'import pydantic'` = "
          f"{floor * 1000:.0f} ms")
    for name, seconds in figures.items():
        ratio = seconds / floor
        verdict = "ok" if ratio <= TARGETS[name] else "over target"
        print(f"  agent-runtime {name:<9} {ratio:5.2f}x the floor "
              f"(target <= {TARGETS[name]:g}x: {verdict})")


if __name__ == "__main__":
    main()
