"""`agent-runtime events RUN --url URL [--follow]`: a run's events from the HTTP API.

The run's durable event log (`GET /runs/{runId}/events`) read with
`AgentRuntimeClient.events`: what it holds now, or with `--follow` also what
the run commits later, long-polled and resumed from the last cursor after a
dropped connection, until the run has ended. The token is `--token`, else
the `AGENT_RUNTIME_TOKEN` environment variable, else the file a local `serve`
writes (`.agent-runtime/serve.token`), so it need not appear in a process
listing. Events print as the file mode prints them (`events.py`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import httpx
from pydantic.alias_generators import to_snake

from agent_runtime.api.event_wire import EventView
from agent_runtime.api.local_auth import DEFAULT_TOKEN_FILE
from agent_runtime.cli.output import TerminalStream, guarded
from agent_runtime.cli.reports import print_event
from agent_runtime.client import AgentRuntimeClient, ApiError
from agent_runtime.errors import InvalidInput, NotFound
from agent_runtime.events import Event

TOKEN_VARIABLE = "AGENT_RUNTIME_TOKEN"


def _token(args: argparse.Namespace) -> str | None:
    if args.token:
        return str(args.token)
    if os.environ.get(TOKEN_VARIABLE):
        return os.environ[TOKEN_VARIABLE]
    path = Path(DEFAULT_TOKEN_FILE)
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def as_event(view: EventView) -> Event:
    """The API's view as the runtime's event (data keys back in snake_case)."""
    return Event(id=view.id, run_id=view.run_id, attempt=view.attempt, sequence=view.sequence,
                 timestamp=view.timestamp, type=view.type, step_id=view.step_id,
                 step_path=view.step_path,
                 data={to_snake(key): value for key, value in view.data.items()})


def cmd_remote_events(args: argparse.Namespace) -> int:
    run_id = args.file
    for flag, given in (("--tail", args.tail is not None), ("--run", bool(args.run))):
        if given:
            raise InvalidInput(f"{flag} reads a JSONL file; with --url the run is RUN and "
                               "--after CURSOR picks where to start", field=flag)
    out = guarded(sys.stdout)
    try:
        with AgentRuntimeClient(args.url, token=_token(args)) as client:
            for view in client.events(run_id, after=args.after, follow=args.follow):
                event = as_event(view)
                if args.type and not (event.type == args.type.rstrip("*").rstrip(".") or
                                      event.type.startswith(args.type.rstrip("*").rstrip(".")
                                                            + ".")):
                    continue
                print_event(event, args.format, out, shape=args.ndjson_shape)
                if isinstance(out, TerminalStream) and out.closed_by_reader:
                    return 0
    except ValueError as error:  # a run id that is not one
        raise InvalidInput(str(error), field="RUN") from None
    except ApiError as error:
        if error.status == 404:
            raise NotFound(f"no run {run_id} at this API (or not this caller's)",
                           source=args.url) from None
        raise InvalidInput(f"the API answered {error.status}: {error.detail}",
                           source=args.url) from None
    except httpx.HTTPError as error:
        raise InvalidInput(f"the API could not be reached: {type(error).__name__}",
                           source=args.url) from None
    return 0
