"""`agent-runtime examples list|show|run NAME`: the example agents of the repository.

An example is `NAME.agent.yaml`, with `NAME.script.yaml` (a scripted
model's answers, so it runs offline) and the shared `tools.py` when they
exist. `run` runs it exactly as `agent-runtime run` would, with those as its
`--model` and `--tools` unless given, on the same store and flags.

They ship inside the package (`agent_runtime/examples/`, package data), so an
installed wheel has them too; they are copies of the repository's
`examples/`, which the README and `make run` use, and a test keeps the two
the same.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from agent_runtime.cli.errors import EXIT_COMPLETED
from agent_runtime.cli.output import guarded
from agent_runtime.errors import InvalidInput, NotFound
from agent_runtime.excerpts import excerpt, printable

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
SUFFIX = ".agent.yaml"


def _examples() -> dict[str, Path]:
    if not EXAMPLES_DIR.is_dir():
        raise NotFound(f"this installation has no examples ({EXAMPLES_DIR} is missing)",
                       source="examples")
    return {path.name.removesuffix(SUFFIX): path
            for path in sorted(EXAMPLES_DIR.glob(f"*{SUFFIX}"))}


def _example(name: str | None) -> Path:
    if not name:
        raise InvalidInput("name an example: agent-runtime examples list", source="NAME")
    found = _examples()
    if name not in found:
        raise NotFound(f"no example {excerpt(name)}; there are: {', '.join(found) or 'none'}",
                       source="NAME")
    return found[name]


def _summary(path: Path) -> str:
    try:
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return "(unreadable)"
    if not isinstance(body, dict):
        return "(not a manifest)"
    text = str(body.get("description") or body.get("name") or "").strip()
    return f"{text} ({len(body.get('steps') or [])} steps)"


def cmd_examples(args: argparse.Namespace) -> int:
    out = guarded(sys.stdout)
    if args.action == "list":
        for name, path in _examples().items():
            print(printable(f"{name:<16} {_summary(path)}", multiline=False), file=out)
        return EXIT_COMPLETED
    path = _example(args.name)
    if args.action == "show":
        print(printable(path.read_text(encoding="utf-8")), end="", file=out)
        return EXIT_COMPLETED
    script = path.with_name(path.name.removesuffix(SUFFIX) + ".script.yaml")
    tools = path.with_name("tools.py")
    if args.model is None and script.is_file():
        args.model = f"scripted/{script}"
    if args.tools is None and tools.is_file():
        args.tools = [str(tools)]
    args.file = str(path)
    from agent_runtime.cli.runs import cmd_run  # noqa: PLC0415 - runs load the engine

    return cmd_run(args)
