"""What the default host policy's loop limit costs, and what past it answers.

Runs a counting loop of `maxIterations` at `serve`'s default limit
(`policy.maxLoopIterations`, 1,000), with an echo prompt per iteration, on a
SQLite store under that policy, and prints its peak traced memory and the
bytes it stored (the sum of `CheckpointInfo.size_bytes`, and the SQLite
file), each as a ratio to a 10-iteration run of the same loop measured in
the same process; then submits the limit plus one and prints the refusal.

    python bench/policy_limits.py [--iterations N]
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

from agent_runtime import AgentRuntime
from agent_runtime.errors import InvalidInput
from agent_runtime.policy import HostPolicy
from stores.sqlite import SqliteRunStore

ECHO = {"model": "scripted/echo"}


def loop(iterations: int) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "at-the-limit", "steps": [
        {"id": "spin", "type": "loop", "loop": {"maxIterations": iterations},
         "steps": [{"id": "ask", "type": "prompt",
                    "prompt": "iteration {{ loop.iteration }}"}]}]}


def measure(iterations: int, policy: HostPolicy) -> tuple[int, int, int]:
    """(peak traced bytes, stored checkpoint bytes, SQLite file bytes) of one run."""
    with tempfile.TemporaryDirectory(prefix="agent-runtime-policy-") as directory:
        path = Path(directory) / "runs.sqlite"
        with SqliteRunStore(path) as store:
            runtime = AgentRuntime(store=store, policy=policy)
            gc.collect()
            tracemalloc.start()
            result = runtime.run_sync(manifest=loop(iterations), options=ECHO)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert result.status == "completed", result
            stored = sum(info.size_bytes for info in store.list_checkpoints(result.run_id))
        files = sum(part.stat().st_size for part in Path(directory).iterdir())
    return peak, stored, files


def main() -> None:
    policy = HostPolicy()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=policy.max_loop_iterations)
    limit = parser.parse_args().iterations
    small = measure(10, policy)
    large = measure(limit, policy)
    print(f"policy_limits: a counting loop of {limit:,} iterations (an echo prompt each), "
          "SQLite, default host policy")
    for name, index in (("peak traced memory", 0), ("stored checkpoint bytes", 1),
                        ("SQLite files", 2)):
        print(f"  {name:24} {large[index]:>12,} B   x{large[index] / small[index]:.1f} "
              f"of 10 iterations ({small[index]:,} B), "
              f"{large[index] / limit:,.0f} B per iteration")
    try:
        AgentRuntime(policy=policy).run_sync(manifest=loop(limit + 1), options=ECHO)
    except InvalidInput as refused:
        print(f"  {limit + 1:,} iterations: refused before a run exists: {refused.render()}")
    else:
        raise SystemExit("a loop past the limit was not refused")


if __name__ == "__main__":
    main()
