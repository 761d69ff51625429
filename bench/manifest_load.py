"""`agent-runtime validate`'s load and parse of a large manifest against a plain
`yaml.load(..., CSafeLoader)` of the same file, measured in one run.

The manifest is ~1 MB of YAML: a few thousand prompt steps with metadata, the
shape a generated agent has. Ours is what `validate` does before it prints:
the bounded read, YAML with the duplicate-key and scalar refusals, the
structure guard, the schema and the hash (`load_manifest_file` and
`manifest_hash`). The floor reads the same bytes and calls
`yaml.load(text, Loader=yaml.CSafeLoader)`, nothing else. A second peer, the
pure-Python `yaml.SafeLoader` the loader used before, shows what libyaml buys.

Prints ratios (ours / floor, SafeLoader / floor), the median of the rounds, and
the absolute seconds only for orientation.

    python bench/manifest_load.py [--megabytes 1] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from agent_runtime.manifest import manifest_hash
from agent_runtime.run_manifest import load_manifest_file

STEP = """  - id: step-{i}
    type: prompt
    name: Step {i}
    systemPrompt: You are a careful reviewer of release notes, number {i}.
    prompt: "Summarise item {i} for {{{{ audience }}}} in three sentences, plainly."
    outputVariable: result{i}
    includeInFinalOutput: {final}
    when: "audience != null && {i} >= 0"
    metadata:
      owner: team-{owner}
      tags: [review, release, batch-{owner}]
      weight: {weight}
"""


def write_manifest(path: Path, megabytes: float) -> int:
    parts = ["schemaVersion: '1.0'\nid: bench\nname: Manifest load bench\n",
             "variables:\n  - {key: audience, type: string, value: partners}\n", "steps:\n"]
    size, i = sum(map(len, parts)), 0
    while size < megabytes * 1_000_000:
        step = STEP.format(i=i, final=str(i % 50 == 0).lower(), owner=i % 17,
                           weight=round(i * 0.37, 2))
        parts.append(step)
        size += len(step)
        i += 1
    path.write_text("".join(parts), encoding="utf-8")
    return i



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not getattr(yaml, "__with_libyaml__", False):
        raise SystemExit("PyYAML here is built without libyaml: there is no CSafeLoader floor")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "big.agent.yaml"
        steps = write_manifest(path, args.megabytes)

        def ours() -> None:
            manifest_hash(load_manifest_file(path).agent)

        def floor() -> None:
            yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)

        def pure() -> None:
            yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)

        ours()  # warm: imports, caches
        # Interleaved rounds, so a busy machine slows all three alike.
        measured: dict[str, list[float]] = {"ours": [], "floor": [], "pure": []}
        for _ in range(args.rounds):
            for name, work in (("ours", ours), ("floor", floor), ("pure", pure)):
                started = time.perf_counter()
                work()
                measured[name].append(time.perf_counter() - started)
        median = {name: statistics.median(samples) for name, samples in measured.items()}
        print(f"manifest: {path.stat().st_size:,} bytes, {steps:,} steps, "
              f"median of {args.rounds} rounds")
        print(f"validate load+parse / CSafeLoader load: {median['ours'] / median['floor']:.2f}x "
              f"({median['ours']:.3f}s / {median['floor']:.3f}s)")
        print(f"SafeLoader load / CSafeLoader load:     {median['pure'] / median['floor']:.2f}x")


if __name__ == "__main__":
    main()
