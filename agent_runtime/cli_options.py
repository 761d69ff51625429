"""How the CLI turns flags and a run's remembered options into a store and a runtime.

A run remembers its runtime options (`--model`, `--config`, `--tools`, and the
manifest's path); `resume`, `approve --resume`, `effects resolve`, `fork` and
`reconcile` rebuild the same runtime from them unless given again.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from stores import open_store
from stores.artifacts import LocalArtifactStore
from stores.base import RunStore
from stores.records import Budget

from agent_runtime.config import import_tool_target, load_config
from agent_runtime.engine import AgentRuntime
from agent_runtime.errors import ConfigError, InvalidInput
from agent_runtime.events import CallbackEventSink, EventSink, JsonlEventSink
from agent_runtime.reports import print_event
from agent_runtime.stream import StreamView
from agent_runtime.tools import Tool, load_tool_file, tool

DEFAULT_STORE = "./.agent-runtime/runs.sqlite"
DEFAULT_EVENTS = "./.agent-runtime/events.jsonl"
DEFAULT_ARTIFACTS = "./.agent-runtime/artifacts"


def open_run_store(args: argparse.Namespace) -> RunStore:
    location = args.store or (DEFAULT_STORE if args.store_driver != "memory" else None)
    try:
        return open_store(args.store_driver, location)
    except ValueError as error:
        raise ConfigError(str(error), source="--store") from error


def parse_variables(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    source = "--variables"
    if text.startswith("@"):
        source = text[1:]
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as error:
            raise InvalidInput(f"cannot read the variables file: {error.strerror}",
                               source=source) from error
    try:
        value = json.loads(text) if source == "--variables" or source.endswith(".json") \
            else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise InvalidInput(f"not valid JSON: {error}", source=source) from error
    if not isinstance(value, dict):
        raise InvalidInput("must be an object of variable names to values", source=source)
    return value


def model_option(value: str | None) -> str | None:
    if value is None:
        return None
    provider, _, model = value.partition("/")
    if not provider or not model:
        raise InvalidInput("expected PROVIDER/MODEL, e.g. scripted/echo or openai/gpt-5.6",
                           source="--model")
    if provider == "scripted" and model != "echo":
        script = Path(model)
        if not script.is_file():
            raise InvalidInput(f"scripted model script {model!r} not found", source="--model")
        return f"scripted/{script.resolve()}"
    return value


def run_options(args: argparse.Namespace, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """Runtime options of a run: given flags win, else what the run remembered."""
    options = dict(previous or {})
    if getattr(args, "model", None):
        options["model"] = model_option(args.model)
    if getattr(args, "config", None):
        options["config"] = str(Path(args.config).resolve())
    if getattr(args, "tools", None):
        options["tools"] = [str(Path(path).resolve()) for path in args.tools]
    return options


def load_tools(options: dict[str, Any], config: Any) -> list[Tool]:
    found: list[Tool] = []
    for path in options.get("tools", []):
        found.extend(load_tool_file(path))
    if config is not None:
        for name, target in config.tools.items():
            item = import_tool_target(target, source=options.get("config", "--config"), name=name)
            found.append(item if isinstance(item, Tool) else tool(name=name)(item))
    return found


def build_runtime(
        args: argparse.Namespace, store: RunStore, options: dict[str, Any],
        extra_sinks: Sequence[EventSink] = ()) -> tuple[AgentRuntime, list[JsonlEventSink]]:
    """A runtime for a run's options, and the event files it writes (to close after)."""
    config = load_config(options["config"]) if options.get("config") else None
    sinks: list[EventSink] = list(extra_sinks)
    files: list[JsonlEventSink] = []
    events = getattr(args, "events", DEFAULT_EVENTS)
    if events and events != "none":
        files.append(JsonlEventSink(events))
        sinks.append(files[-1])
    view = StreamView(sys.stderr) if getattr(args, "stream", False) else None
    if view is not None:
        sinks.append(view)
    if getattr(args, "format", "pretty") == "ndjson":
        sinks.append(CallbackEventSink(lambda event: print_event(event, "ndjson", sys.stdout)))
    artifacts = getattr(args, "artifacts", None)
    runtime = AgentRuntime(store=store, config=config, tools=load_tools(options, config),
                           event_sinks=sinks, lease_seconds=getattr(args, "lease_seconds", 30.0),
                           text_sink=None if view is None else view.text,
                           artifacts=None if artifacts in (None, "none")
                           else LocalArtifactStore(artifacts))
    return runtime, files


def budget_from(args: argparse.Namespace) -> Budget | None:
    value = getattr(args, "max_total_tokens", None)
    if value is None:
        return None
    if value <= 0:
        raise InvalidInput("must be a positive number of tokens", source="--max-total-tokens")
    return Budget(max_total_tokens=value)
