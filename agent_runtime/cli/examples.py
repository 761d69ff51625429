"""`agent-runtime examples list|show|run NAME`: every example manifest the package ships.

Two sets ship inside the package (package data), so an installed wheel has
them too:

- `agent_runtime/examples/`: `NAME.agent.yaml`, with `NAME.script.yaml` (a
  scripted model's answers, so it runs offline) and the shared `tools.py`.
  They are copies of the repository's `examples/` (the README and `make run`
  use those; a test keeps the two the same). `variables`, `conditions` and
  `loops` are the reference implementation's standalone example names, in
  manifests of our own.
- `agent_runtime/console/examples/`: the web console's examples, described by
  its `index.json`, which names the model each runs with (`scripted/echo`).

A name in the first set wins over the same name in the second. `run` runs an
example exactly as `agent-runtime run` would, with its script (or the
console's model) and tools as `--model` and `--tools` unless given, on the
same store and flags.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from agent_runtime.cli.errors import EXIT_COMPLETED
from agent_runtime.cli.output import guarded
from agent_runtime.errors import InvalidInput, NotFound
from agent_runtime.excerpts import excerpt, printable

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = PACKAGE / "examples"
CONSOLE_EXAMPLES_DIR = PACKAGE / "console" / "examples"
SUFFIX = ".agent.yaml"
_DESCRIPTION_SHOWN = 120  # characters of a description in `examples list`


@dataclass(frozen=True)
class Example:
    """One packaged example: its manifest, what it shows, and how it runs offline."""

    name: str
    path: Path
    description: str
    model: str | None = None  # the default --model
    tools: Path | None = None  # the default --tools


def _described(path: Path) -> str:
    """The manifest's own description (else its name), on one line."""
    try:
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return "(unreadable)"
    if not isinstance(body, dict):
        return "(not a manifest)"
    return " ".join(str(body.get("description") or body.get("name") or "").split())


def _repository_examples() -> list[Example]:
    tools = EXAMPLES_DIR / "tools.py"
    found = []
    for path in sorted(EXAMPLES_DIR.glob(f"*{SUFFIX}")):
        name = path.name.removesuffix(SUFFIX)
        script = path.with_name(f"{name}.script.yaml")
        found.append(Example(name, path, _described(path),
                             model=f"scripted/{script}" if script.is_file() else None,
                             tools=tools if tools.is_file() else None))
    return found


def _console_examples() -> list[Example]:
    try:
        index = json.loads((CONSOLE_EXAMPLES_DIR / "index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    found = []
    for entry in index.get("examples", []) if isinstance(index, dict) else []:
        if not isinstance(entry, dict) or not str(entry.get("file", "")).endswith(SUFFIX):
            continue
        path = CONSOLE_EXAMPLES_DIR / Path(str(entry["file"])).name
        if path.is_file():
            found.append(Example(path.name.removesuffix(SUFFIX), path,
                                 " ".join(str(entry.get("description") or "").split())
                                 or _described(path),
                                 model=str(entry["model"]) if entry.get("model") else None))
    return found


def catalogue() -> dict[str, Example]:
    """Every packaged example by name, sorted; the repository's win a shared name."""
    examples: dict[str, Example] = {}
    for example in [*_repository_examples(), *_console_examples()]:
        examples.setdefault(example.name, example)
    if not examples:
        raise NotFound(f"this installation has no examples ({EXAMPLES_DIR} is missing)",
                       source="examples")
    return dict(sorted(examples.items()))


def _example(name: str | None) -> Example:
    if not name:
        raise InvalidInput("name an example: agent-runtime examples list", source="NAME")
    found = catalogue()
    if name not in found:
        raise NotFound(f"no example {excerpt(name)}; there are: {', '.join(found)}",
                       source="NAME")
    return found[name]


def _one_line(text: str) -> str:
    return text if len(text) <= _DESCRIPTION_SHOWN else text[:_DESCRIPTION_SHOWN - 1] + "…"


def cmd_examples(args: argparse.Namespace) -> int:
    out = guarded(sys.stdout)
    if args.action == "list":
        examples = catalogue()
        width = max(len(name) for name in examples) + 2
        for name, example in examples.items():
            print(printable(f"{name:<{width}}{_one_line(example.description)}",
                            multiline=False), file=out)
        return EXIT_COMPLETED
    example = _example(args.name)
    if args.action == "show":
        print(printable(example.path.read_text(encoding="utf-8")), end="", file=out)
        return EXIT_COMPLETED
    if args.model is None:
        args.model = example.model
    if args.tools is None and example.tools is not None:
        args.tools = [str(example.tools)]
    args.file = str(example.path)
    from agent_runtime.cli.runs import cmd_run  # noqa: PLC0415 - runs load the engine

    return cmd_run(args)
