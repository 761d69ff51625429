"""How the `agent-runtime` command reports an error: its exit code and one line.

Exit codes (docs/design.md section 9), and what raises them:

- 0 completed (or nothing to do);
- 10 suspended: waiting for an approval, a sub-run, a budget;
- 1 the run failed or was cancelled; or a store error (`CorruptRecord`: the
  store is damaged; other `StoreError`s: it cannot be used) or an OS error;
- 2 invalid input: a manifest, a variable, a flag, a path of the wrong kind
  (`InvalidInput`);
- 3 not found: no such run, store or file to read (`NotFound`, `RunNotFound`);
- 4 conflict: a lease held, a run already terminal, an answer already given,
  a run id taken (`Conflict`, and the store's `stores.CONFLICT_ERRORS`, which
  the HTTP API answers with 409);
- 130 interrupted (Ctrl-C); the run keeps its latest checkpoint.

The message is one line on stderr, `error: <where>: <why>`, or with
`--format json` one JSON object `{"error": {"code", "message", "field"?}}`.
Either way it is escaped for a terminal and at most `MAX_MESSAGE` characters:
user data appears in it only as a short excerpt.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agent_runtime.errors import Conflict, InvalidInput, NotFound
from agent_runtime.excerpts import printable

EXIT_COMPLETED = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_SUSPENDED = 10
EXIT_INTERRUPTED = 130

MAX_MESSAGE = 400



def store_name(args: argparse.Namespace | None) -> str:
    driver = getattr(args, "store_driver", None)
    if args is None or driver is None:
        return "the store"
    from agent_runtime.cli.options import store_location  # noqa: PLC0415 - a cycle otherwise

    location = store_location(args)
    return f"the {driver} store" + (f" {location}" if location else "")


def classify(error: BaseException, args: argparse.Namespace | None) -> tuple[int, str, str]:
    """(exit code, error code, message) for an error the command ends with."""
    # Imported here: a command that never opened a store need not load them.
    from stores import CONFLICT_ERRORS, CorruptRecord, RunNotFound, StoreError  # noqa: PLC0415

    if isinstance(error, NotFound | RunNotFound):
        return EXIT_NOT_FOUND, "not_found", str(error)
    if isinstance(error, (Conflict, *CONFLICT_ERRORS)):
        return EXIT_CONFLICT, "conflict", str(error)
    if isinstance(error, InvalidInput):
        return EXIT_INVALID, "invalid_input", str(error)
    if isinstance(error, CorruptRecord):
        return EXIT_FAILED, "store_damaged", f"{store_name(args)} is damaged: {error}"
    if isinstance(error, StoreError):
        return EXIT_FAILED, "store_error", \
            f"{store_name(args)}: {type(error).__name__}: {error}"
    if isinstance(error, OSError):
        where = f"{error.filename}: " if error.filename else ""
        return EXIT_FAILED, "os_error", f"{where}{error.strerror or type(error).__name__}"
    raise error


def one_line(message: str) -> str:
    """`message` escaped for a terminal, on one line, at most `MAX_MESSAGE` characters."""
    text = printable(message, multiline=False)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 1] + "…"


def report_error(error: BaseException, args: argparse.Namespace | None) -> int:
    """Print `error` the way the command's `--format` asks; return the exit code."""
    code, kind, message = classify(error, args)
    if getattr(args, "format", None) == "json":
        body: dict[str, Any] = {"code": kind, "message": one_line(message)}
        field = getattr(error, "field", None)
        if isinstance(field, str) and field:
            body["field"] = one_line(field)
        print(json.dumps({"error": body}), file=sys.stderr)
    else:
        print(f"error: {one_line(message)}", file=sys.stderr)
    return code
