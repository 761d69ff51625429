"""A code-runner Lambda: runs one `code` step's source and answers how it ended.

Invoked by Advance only (functions/lambda_sandbox.py; its role alone is
granted lambda:InvokeFunction on this function). The request:

    {"version": 1, "language": "python" | "javascript", "code": SOURCE,
     "variables": JSON_TEXT, "environment": {NAME: VALUE},
     "timeout_ms": N, "limits": {"memory_mb", "cpu_seconds", "max_processes",
                                 "max_file_bytes", "max_output_bytes"}}

The answer: `{"version": 1, "exit_code", "stdout", "stderr", "limit"}`,
stdout and stderr base64 (at most `max_output_bytes` each, before encoding),
`limit` the limit that ended the code (`timeout`, `output`, `cpu`) or null.
A request that breaks this shape fails the invocation, naming the field.

The source and the variables are written to a fresh directory under /tmp
(`main.py` or `main.js`, `variables.json`, `output/`), read-only; the code runs there
(functions/code_runner/confinement.py) with an environment of the step's
`environment`, `PATH`, `HOME` and `TMPDIR` (that directory), `LANG`, the
loader's `LD_LIBRARY_PATH` and the two `AGENT_*` variables, nothing of the
function's own. On Lambda, everything else in /tmp goes too, before and after
each run: an execution environment is reused by later invocations. Nothing
is logged: the source, the variables and the output never leave the answer.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from functions.code_runner.confinement import (
    Limits,
    Outcome,
    guard_this_process,
    run_confined,
)

VERSION = 1
MIB = 1024 * 1024
# The answer must go back before Lambda's own timeout ends the invocation.
ANSWER_MARGIN_MS = 2_000
ENVIRONMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SET_BY_THE_RUNNER = frozenset({"AGENT_VARIABLES_FILE", "AGENT_OUTPUT_DIRECTORY", "HOME", "PATH",
                               "TMPDIR", "LD_LIBRARY_PATH", "LANG"})
# Where the node layer (layers/node, template.yaml: NodeLayer) puts node: a
# layer's files are under /opt. Only the javascript runner has the layer.
NODE = "/opt/node/bin/node"
# V8 reserves far more address space than it uses, so node's limit is this
# much and its heap the memory asked (--max-old-space-size), as the local
# sandbox does (agent_runtime/sandbox/settings.py); the function's own
# memory bounds what it really uses.
NODE_ADDRESS_SPACE_MB = 4096
# Bounds on what a request may ask for (the function's memory and /tmp bound the rest).
CEILINGS = {"memory_mb": 10_240, "cpu_seconds": 900, "max_processes": 4_096,
            "max_file_bytes": 10_240 * MIB, "max_output_bytes": 2 * MIB}


@dataclass(frozen=True)
class Language:
    """How code in one language runs: its command (`{memory_mb}` filled in), its
    file's extension, and the address space it needs at least."""

    command: tuple[str, ...]
    extension: str
    address_space_mb: int = 0


def languages() -> dict[str, Language]:
    """The languages this function runs: python with the function's own interpreter,
    isolated from the environment and the user's site (-I); javascript where the
    node layer is attached."""
    found = {"python": Language((sys.executable, "-I"), "py")}
    if os.access(NODE, os.X_OK):
        found["javascript"] = Language((NODE, "--max-old-space-size={memory_mb}"), "js",
                                       NODE_ADDRESS_SPACE_MB)
    return found


def _on_lambda() -> bool:
    # Set by Lambda's runtime in every execution environment, never by a test.
    return bool(os.environ.get("AWS_LAMBDA_RUNTIME_API"))


def _field(event: Mapping[str, Any], name: str, kind: type) -> Any:
    value = event.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"code runner request: {name} must be a {kind.__name__}")
    return value


def _limits(event: Mapping[str, Any], timeout_seconds: float, language: Language) -> Limits:
    asked = _field(event, "limits", dict)
    values = {}
    for name, ceiling in CEILINGS.items():
        value = _field(asked, name, int)
        if not 1 <= value <= ceiling:
            raise ValueError(f"code runner request: limits.{name} must be 1..{ceiling}")
        values[name] = value
    memory_mb = max(values["memory_mb"], language.address_space_mb)
    return Limits(memory_bytes=memory_mb * MIB, cpu_seconds=values["cpu_seconds"],
                  processes=values["max_processes"], file_bytes=values["max_file_bytes"],
                  output_bytes=values["max_output_bytes"], timeout_seconds=timeout_seconds)


def _environment(event: Mapping[str, Any], workspace: Path) -> dict[str, str]:
    asked = _field(event, "environment", dict)
    for name, value in asked.items():
        if not ENVIRONMENT_NAME.fullmatch(name) or name in SET_BY_THE_RUNNER \
                or not isinstance(value, str):
            raise ValueError("code runner request: environment names a variable the runner "
                             "sets, or is not NAME: string")
    environment = {**asked, "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workspace),
                   "TMPDIR": str(workspace / "tmp"), "LANG": "C.UTF-8",
                   "AGENT_VARIABLES_FILE": str(workspace / "variables.json"),
                   "AGENT_OUTPUT_DIRECTORY": str(workspace / "output")}
    # The runtime's interpreter finds its libraries through it on Lambda.
    if os.environ.get("LD_LIBRARY_PATH"):
        environment["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    return environment


def _clear(directory: Path) -> None:
    """Remove what `directory` holds (what earlier code left in /tmp)."""
    for entry in directory.iterdir():
        with contextlib.suppress(OSError):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink()


def _answer(outcome: Outcome) -> dict[str, Any]:
    return {"version": VERSION, "exit_code": outcome.exit_code,
            "stdout": base64.b64encode(outcome.stdout).decode(),
            "stderr": base64.b64encode(outcome.stderr).decode(), "limit": outcome.limit}


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    if event.get("version") != VERSION:
        raise ValueError(f"code runner request: version must be {VERSION}")
    name = _field(event, "language", str)
    language = languages().get(name)
    if language is None:
        raise ValueError(f"code runner request: language {name!r} does not run here")
    code, variables = _field(event, "code", str), _field(event, "variables", str)
    timeout_ms = _field(event, "timeout_ms", int)
    room_ms = context.get_remaining_time_in_millis() - ANSWER_MARGIN_MS
    if timeout_ms < 1 or room_ms < 1:
        raise ValueError("code runner request: timeout_ms must be positive and within the "
                         "function's timeout")
    limits = _limits(event, min(timeout_ms, room_ms) / 1000, language)
    memory_mb = event["limits"]["memory_mb"]
    command = [part.replace("{memory_mb}", str(memory_mb)) for part in language.command]
    on_lambda = _on_lambda()
    scratch = Path(tempfile.gettempdir())
    if on_lambda:
        guard_this_process()
        _clear(scratch)
    workspace = Path(tempfile.mkdtemp(prefix="code-", dir=scratch))
    try:
        source = workspace / f"main.{language.extension}"
        source.write_text(code, encoding="utf-8")
        (workspace / "variables.json").write_text(variables, encoding="utf-8")
        for path in (source, workspace / "variables.json"):
            path.chmod(0o400)
        (workspace / "output").mkdir()
        (workspace / "tmp").mkdir()
        outcome = run_confined([*command, str(source)], env=_environment(event, workspace),
                               cwd=workspace, limits=limits, sweep_descendants=on_lambda)
        return _answer(outcome)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
        if on_lambda:
            _clear(scratch)
