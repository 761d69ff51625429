"""The runtimes `agent-runtime serve` builds: one per attempt, from the run's remembered
options with serve's flags winning (as for `agent-runtime resume`).

A runtime is cheap; what its options name is not: parsing the config file and
importing a tools file took milliseconds per attempt, on the event loop every
other run waits on, and kept a copy of the tools module per run. So the config
and tools of each distinct set of files are loaded once and shared, and loaded
again when one of the files changes (its size or modification time), as a
runtime built afresh would have seen it.
"""

from __future__ import annotations

import argparse
import os
import threading
from collections import OrderedDict
from typing import Any

from stores.base import RunStore
from stores.records import RunRecord

from agent_runtime.cli.options import run_options, runtime_config
from agent_runtime.cli.runtime import build_runtime, load_tools
from agent_runtime.config import RuntimeConfig
from agent_runtime.engine import AgentRuntime
from agent_runtime.events import EventSink
from agent_runtime.policy import HostPolicy
from agent_runtime.store_thread import StorePool
from agent_runtime.tools import Tool

# Distinct (config, tools) sets kept loaded; a server sees a handful.
MAX_PREPARED = 32

Prepared = tuple[RuntimeConfig | None, list[Tool]]
# A file as loaded: its path, size and modification time (ns).
_FileState = tuple[str, int, int]
# The config file's state (if any) and the tools files'.
_FilesKey = tuple[_FileState | None, tuple[_FileState, ...]]


class ServeRuntimes:
    """`runtime_for(record)`: the runtime of one attempt of `record` (None: the routes')."""

    def __init__(self, run_args: argparse.Namespace, store: RunStore,
                 sinks: list[EventSink], store_pool: StorePool | None = None) -> None:
        self.run_args = run_args
        self.store = store
        self.sinks = sinks
        self.store_pool = store_pool
        self._lock = threading.Lock()
        self._prepared: OrderedDict[_FilesKey, Prepared] = OrderedDict()

    def __call__(self, record: RunRecord | None) -> AgentRuntime:
        options = run_options(self.run_args, None if record is None else record.options)
        # Tenants' manifests run here: without a `policy:` in the config, the safe defaults.
        return build_runtime(self.run_args, self.store, options, extra_sinks=self.sinks,
                             prepared=self.prepared(options), default_policy=HostPolicy(),
                             store_pool=self.store_pool)[0]

    def prepared(self, options: dict[str, Any]) -> Prepared:
        """The config and tools `options` name, loaded once per state of their files."""
        key = _files_key(options)
        if key is None:  # a file is missing: the loaders say which, by name
            config = runtime_config(options)
            return config, load_tools(options, config)
        with self._lock:
            found = self._prepared.get(key)
            if found is not None:
                self._prepared.move_to_end(key)
                return found
        config = runtime_config(options)
        loaded = config, load_tools(options, config)
        with self._lock:
            self._prepared[key] = loaded
            while len(self._prepared) > MAX_PREPARED:
                self._prepared.popitem(last=False)
        return loaded


def _files_key(options: dict[str, Any]) -> _FilesKey | None:
    """The files the options name, each with its size and modification time; None when
    one cannot be read."""
    try:
        config = _state(str(options["config"])) if options.get("config") else None
        tools = tuple(_state(str(path)) for path in options.get("tools", []))
    except OSError:
        return None
    return config, tools


def _state(path: str) -> _FileState:
    stat = os.stat(path)
    return path, stat.st_size, stat.st_mtime_ns


__all__ = ["MAX_PREPARED", "ServeRuntimes"]
