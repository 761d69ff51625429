"""Rebuild the upstream corpus from an unpacked reference source tree.

    python tests/reference/corpus/collect.py /path/to/agent-runtime-0.4.1

Copies every example manifest, run manifest and runtime config the reference
ships (`examples/**`, `packages/*/examples/**`) to the same relative path
here, and every YAML or JSON code block of its documentation (`README.md`,
`docs/*.md`, `packages/*/README.md`, `examples/*/README.md`) that is a whole
manifest, run manifest or runtime config to `<doc path>-block-NN.<kind>.<ext>`,
NN counting every fenced block of that document from 1. Bytes are kept as
upstream wrote them. `index.json` records where each file came from and which
documentation blocks were left out and why.

Which kind a block is, from its top-level keys (see README.md):
    agent   -> a mapping with `steps`, or `schemaVersion` without `agent`
    run     -> a mapping with `agent`
    config  -> a mapping with `version`, `providers` or `models`
An agent manifest excerpt without `schemaVersion` is also checked with
`schemaVersion: "1.0"` put first (`completion` in index.json).
Anything else (a lone field such as `model:` or `auth:`, a list of steps, an
event stream, an envelope) is an excerpt, not a document a validator reads.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
EXAMPLE_GLOBS = ("examples/**/*", "packages/*/examples/**/*")
EXAMPLE_SUFFIXES = (".agent.yaml", ".agent.yml", ".agent.json", ".run.yaml", ".run.yml",
                    ".run.json", ".config.yaml", ".config.yml", ".config.json")
DOC_GLOBS = ("README.md", "docs/*.md", "packages/*/README.md", "examples/*/README.md")
FENCE = re.compile(r"^```(?P<lang>[A-Za-z0-9_-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$",
                   re.MULTILINE | re.DOTALL)
# The line the documentation's agent-manifest excerpts leave out; each is
# checked again with it put first (README.md, "Completed excerpts").
COMPLETION = 'schemaVersion: "1.0"\n'
DOCUMENT_LANGS = {"yaml": "yaml", "yml": "yaml", "json": "json"}


def kind_of(document: Any) -> str | None:
    if not isinstance(document, dict):
        return None
    if "agent" in document:
        return "run"
    if "steps" in document or "schemaVersion" in document:
        return "agent"
    if document.keys() & {"version", "providers", "models"}:
        return "config"
    return None


def shape_of(document: Any) -> str:
    if isinstance(document, dict):
        return "keys: " + ", ".join(document)
    return "a list" if isinstance(document, list) else "not one YAML or JSON document"


def parse_block(body: str, ext: str) -> Any:
    try:
        return json.loads(body) if ext == "json" else yaml.safe_load(body)
    except (ValueError, yaml.YAMLError):
        return None  # several JSON values (an event stream), or not a document at all


def collect(reference: Path) -> dict[str, Any]:
    files: list[dict[str, Any]] = []
    excerpts: list[dict[str, Any]] = []
    for pattern in EXAMPLE_GLOBS:
        for source in sorted(reference.glob(pattern)):
            if "node_modules" in source.parts or not source.name.endswith(EXAMPLE_SUFFIXES):
                continue
            relative = source.relative_to(reference).as_posix()
            target = HERE / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            files.append({"file": relative, "upstream": relative,
                          "kind": source.name.rsplit(".", 2)[-2]})
    for pattern in DOC_GLOBS:
        for doc in sorted(reference.glob(pattern)):
            relative = doc.relative_to(reference).as_posix()
            text = doc.read_bytes().decode("utf-8")  # newlines as written
            for number, fence in enumerate(FENCE.finditer(text), start=1):
                ext = DOCUMENT_LANGS.get(fence["lang"].lower())
                if ext is None:
                    continue
                line = text.count("\n", 0, fence.start()) + 1
                where = {"upstream": relative, "block": number, "line": line}
                document = parse_block(fence["body"], ext)
                kind = kind_of(document)
                if kind is None:
                    excerpts.append({**where, "shape": shape_of(document)})
                    continue
                name = f"{relative}-block-{number:02d}.{kind}.{ext}"
                target = HERE / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(fence["body"].encode("utf-8"))
                entry = {"file": name, **where, "kind": kind}
                if kind == "agent" and "schemaVersion" not in document:
                    entry["completion"] = COMPLETION  # an excerpt of a manifest, all but this
                files.append(entry)
    return {"files": files, "excerpts": excerpts}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not (Path(argv[1]) / "packages").is_dir():
        print("usage: collect.py REFERENCE_SOURCE_DIRECTORY", file=sys.stderr)
        return 2
    index = collect(Path(argv[1]).resolve())
    (HERE / "index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    print(f"{len(index['files'])} corpus files, {len(index['excerpts'])} excerpts left out")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
