"""How the CLI builds the runtime of a run: its tools, sinks, artifacts and budget.

Apart from `cli.options` (flags, paths, options: light) because this is where
the engine is imported: only commands that execute runs pay for it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stores.artifacts import LocalArtifactStore
from stores.base import RunStore
from stores.records import Budget

from agent_runtime.cli.flags import DEFAULT_EVENTS
from agent_runtime.cli.options import check_sinks, runtime_config
from agent_runtime.cli.output import guarded
from agent_runtime.cli.reports import print_event
from agent_runtime.config import RuntimeConfig
from agent_runtime.engine import AgentRuntime
from agent_runtime.errors import InvalidInput
from agent_runtime.events import CallbackEventSink, EventSink, JsonlEventSink
from agent_runtime.models.adapters import ModelAdapters
from agent_runtime.policy import HostPolicy
from agent_runtime.store_thread import StorePool
from agent_runtime.stream import StreamView
from agent_runtime.telemetry import event_sinks as telemetry_sinks
from agent_runtime.tools import Tool, configured_tools, load_tool_file


def load_tools(options: dict[str, Any], config: RuntimeConfig | None) -> list[Tool]:
    """A run's tools: those of its `--tools` files, then those its config names."""
    found: list[Tool] = []
    for path in options.get("tools", []):
        found.extend(load_tool_file(path))
    if config is not None:
        found.extend(configured_tools(config, source=options.get("config", "--config")))
    return found



def build_runtime(
        args: argparse.Namespace, store: RunStore, options: dict[str, Any],
        extra_sinks: Sequence[EventSink] = (), *,
        prepared: tuple[RuntimeConfig | None, list[Tool]] | None = None,
        default_policy: HostPolicy | None = None, store_pool: StorePool | None = None,
        adapters: ModelAdapters | None = None, artifact_store: LocalArtifactStore | None = None,
        base_dir: Path | None = None,
) -> tuple[AgentRuntime, list[JsonlEventSink]]:
    """A runtime for a run's options, and the event files it writes (to close after).

    `prepared` is the config and tools already loaded for these options (a
    tools file is imported once). `default_policy` is the host policy when the
    config has none (`serve`'s safe defaults; the CLI's is permissive).
    `store_pool`: the store-call threads a host shares between its runtimes;
    `adapters`: the model adapters it shares between runtimes of this config;
    `artifact_store`: the store of `args.artifacts` its runtimes share (else it is
    checked and opened here); `base_dir`: where relative paths of its manifests
    resolve (else the current directory)."""
    if prepared is None:
        config = runtime_config(options)
        prepared = config, load_tools(options, config)
    config, tools = prepared
    check_sinks(args, artifacts=artifact_store is None)
    sinks: list[EventSink] = list(extra_sinks)
    # OpenTelemetry, when the OTEL_* environment asks for it (docs/telemetry.md).
    sinks.extend(telemetry_sinks())
    files: list[JsonlEventSink] = []
    events = getattr(args, "events", DEFAULT_EVENTS)
    if events and events != "none":
        files.append(JsonlEventSink(events))
        sinks.append(files[-1])
    # Output is not the run: a reader that goes away (`| head`) loses the rest
    # of the output, and the run goes on.
    reasoning = getattr(args, "show_reasoning", False)
    view = (StreamView(guarded(sys.stderr)) if getattr(args, "stream", False) or reasoning
            else None)
    if view is not None:
        sinks.append(view)
    if getattr(args, "format", "pretty") == "ndjson":
        out = guarded(sys.stdout)
        shape = getattr(args, "ndjson_shape", "native")
        sinks.append(CallbackEventSink(lambda event: print_event(event, "ndjson", out,
                                                                 shape=shape)))
    if artifact_store is None:
        artifacts = getattr(args, "artifacts", None)
        artifact_store = None if artifacts in (None, "none") else LocalArtifactStore(artifacts)
    policy = (config.policy if config is not None else None) or default_policy
    runtime = AgentRuntime(store=store, config=config, tools=tools, policy=policy,
                           event_sinks=sinks,
                           lease_seconds=getattr(args, "lease_seconds", None) or 30.0,
                           text_sink=None if view is None else view.text,
                           reasoning_sink=view.reasoning if view is not None and reasoning
                           else None,
                           store_pool=store_pool, adapters=adapters,
                           artifacts=artifact_store, base_dir=base_dir)
    return runtime, files


def budget_from(args: argparse.Namespace) -> Budget | None:
    value = getattr(args, "max_total_tokens", None)
    if value is None:
        return None
    if value <= 0:
        raise InvalidInput("must be a positive number of tokens", source="--max-total-tokens")
    return Budget(max_total_tokens=value)
