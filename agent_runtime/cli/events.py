"""`agent-runtime events FILE`: print the events of a JSONL event log.

`--tail N` prints only the last N matching events (as the reference's
`events --tail` does); `--follow` keeps reading what is appended.

An event log is a file anyone may hand to the command, so it is read as
hostile input: a line is at most `limits.EVENT_LINE_BYTES`, and a line that
is not an event (not UTF-8, not JSON, a field of the wrong type) stops the
command with exit 2 naming the file and the line, rather than being skipped:
a log with a damaged middle is not what the writer wrote, and saying so beats
printing part of it as if it were whole. A torn line (a writer killed
mid-line: no closing brace; the next writer ends it) is not damage: it is left
out, as `events.read_events` does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from agent_runtime.cli.options import path_kind
from agent_runtime.cli.output import TerminalStream, guarded
from agent_runtime.cli.reports import print_event
from agent_runtime.errors import InvalidInput, NotFound
from agent_runtime.events import Event, is_torn
from agent_runtime.limits import EVENT_LINE_BYTES
from agent_runtime.manifest_input import clip

_TEXT_FIELDS = ("id", "run_id", "type")
_OPTIONAL_TEXT_FIELDS = ("step_id", "step_path")
_NUMBER_FIELDS = ("attempt", "sequence")


def _event(body: Any) -> Event:
    """The event a decoded line holds; ValueError saying what is wrong with it."""
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    for name in _TEXT_FIELDS:
        if not isinstance(body.get(name), str):
            raise ValueError(f"{name} is missing or not text")
    for name in _OPTIONAL_TEXT_FIELDS:
        if not isinstance(body.get(name, ""), str | None):
            raise ValueError(f"{name} is not text")
    for name in _NUMBER_FIELDS:
        value = body.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{name} is missing or not an integer")
    if not isinstance(body.get("data", {}), dict | None):
        raise ValueError("data is not an object")
    if not isinstance(body.get("timestamp"), str):
        raise ValueError("timestamp is missing or not text")
    datetime.fromisoformat(body["timestamp"])  # ValueError names the problem
    return Event.from_json(body)


def read_event_log(path: Path) -> Iterator[Event]:
    """The events of a JSONL log; `InvalidInput` naming the line that is not one."""
    with path.open("rb") as source:
        number = 0
        while line := source.readline(EVENT_LINE_BYTES + 1):
            number += 1
            if not line.endswith(b"\n"):
                if len(line) > EVENT_LINE_BYTES:
                    raise InvalidInput(f"line {number}: longer than {EVENT_LINE_BYTES:,} bytes",
                                       source=str(path))
                return  # a torn last line
            if not line.strip() or is_torn(line.decode("utf-8", "replace")):
                continue  # a killed writer's fragment, ended by the next writer
            try:
                event = _event(json.loads(line.decode("utf-8")))
            except (ValueError, RecursionError) as error:  # UnicodeDecodeError included
                reason = "not UTF-8" if isinstance(error, UnicodeDecodeError) else \
                    "nested too deeply" if isinstance(error, RecursionError) else \
                    clip(str(error), 100)
                raise InvalidInput(f"line {number}: not an event ({reason})",
                                   source=str(path)) from None
            yield event


def _matches(event: Event, args: argparse.Namespace) -> bool:
    if args.run and event.run_id != args.run:
        return False
    if args.type:
        wanted = args.type.rstrip("*").rstrip(".")
        return bool(event.type == wanted or event.type.startswith(wanted + "."))
    return True


def cmd_events(args: argparse.Namespace) -> int:
    """Print the matching events; `--tail N` only the last N of them, `--follow` then keeps
    printing what is appended. A reader that goes away (`| head`) ends the command.
    With `--url`, FILE is a run id and the events come from the HTTP API."""
    if getattr(args, "url", None):
        from agent_runtime.cli.remote_events import cmd_remote_events  # noqa: PLC0415 - httpx

        return cmd_remote_events(args)
    for flag, given in (("--token", args.token), ("--after", args.after)):
        if given:
            raise InvalidInput(f"{flag} reads from the HTTP API: give --url too", field=flag)
    path = Path(args.file)
    kind = path_kind(path, flag="FILE")
    if kind == "missing":
        raise NotFound("event log not found", source=args.file)
    if kind != "file":
        raise InvalidInput("is not a file, expected a JSONL event log", source=args.file)
    out = guarded(sys.stdout)
    seen = 0
    first = True
    while True:
        fresh = []
        for index, event in enumerate(read_event_log(path)):
            if index >= seen and _matches(event, args):
                fresh.append(event)
            seen = max(seen, index + 1)
        if first and args.tail is not None:
            fresh = fresh[-args.tail:] if args.tail else []
        first = False
        for event in fresh:
            print_event(event, args.format, out, shape=args.ndjson_shape)
            if isinstance(out, TerminalStream) and out.closed_by_reader:
                return 0
        if not args.follow:
            return 0
        time.sleep(0.5)
