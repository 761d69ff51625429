"""The runtimes `agent-runtime serve` builds: one per attempt, from the run's remembered
options with serve's flags winning (as for `agent-runtime resume`).

A runtime is cheap; what its options name is not: parsing the config file and
importing a tools file took milliseconds per attempt, on the event loop every
other run waits on, and kept a copy of the tools module per run. So the config
and tools of each distinct set of files are loaded once and shared, and loaded
again when one of the files changes (its size or modification time), as a
runtime built afresh would have seen it.

The model adapters of a config are shared too, by the runtimes of one tenant
(`ModelAdapters`): an adapter keeps its SDK clients and their connections
while calls are in flight, and one run's calls never overlap, so adapters per
attempt opened a client and a connection for every model call.
"""

from __future__ import annotations

import argparse
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from stores.artifacts import LocalArtifactStore
from stores.base import RunStore
from stores.records import RunRecord

from agent_runtime.cli.options import check_sinks, run_options, runtime_config
from agent_runtime.cli.runtime import build_runtime, load_tools
from agent_runtime.config import RuntimeConfig, empty_config
from agent_runtime.engine import AgentRuntime
from agent_runtime.events import EventSink
from agent_runtime.models.adapters import ModelAdapters
from agent_runtime.policy import HostPolicy
from agent_runtime.store_thread import StorePool
from agent_runtime.tools import Tool

# Distinct (config, tools) sets kept loaded; a server sees a handful.
MAX_PREPARED = 32
# Adapter sets kept, one per (config state, tenant): a set pushed out is only
# rebuilt (its clients close once their calls end).
MAX_ADAPTER_SETS = 256

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
        # serve's own flags as options, its artifact store and its directory, made
        # once: a path resolved, checked and made per attempt was a score of system
        # calls on the event loop, and each lets the interpreter lock go, for every
        # run to wait while it is taken back.
        self._flags = run_options(run_args)
        self._base_dir = Path.cwd()
        check_sinks(run_args)
        artifacts = getattr(run_args, "artifacts", None)
        self._artifacts = (None if artifacts in (None, "none")
                           else LocalArtifactStore(artifacts))
        self._lock = threading.Lock()
        self._prepared_kept: OrderedDict[_FilesKey, Prepared] = OrderedDict()
        self._adapters_kept: OrderedDict[tuple[_FilesKey, str | None], ModelAdapters] = \
            OrderedDict()

    def __call__(self, record: RunRecord | None) -> AgentRuntime:
        # As `run_options(self.run_args, record.options)`: the flags given win.
        options = {**({} if record is None else record.options), **self._flags}
        files = _files_key(options)
        prepared = self._prepared(options, files)
        adapters = None if files is None else self._adapters(
            files, prepared[0], None if record is None else record.tenant)
        # Tenants' manifests run here: without a `policy:` in the config, the safe defaults.
        return build_runtime(self.run_args, self.store, options, extra_sinks=self.sinks,
                             prepared=prepared, default_policy=HostPolicy(),
                             store_pool=self.store_pool, adapters=adapters,
                             artifact_store=self._artifacts, base_dir=self._base_dir)[0]

    def _adapters(self, files: _FilesKey, config: RuntimeConfig | None,
                  tenant: str | None) -> ModelAdapters:
        """The model adapters `tenant`'s runtimes of `config` (as loaded from `files`) share."""
        key = files, tenant
        with self._lock:
            found = self._adapters_kept.get(key)
            # Built from this very config: the same files loaded again (their set
            # pushed out of `_prepared_kept`) are another config, which these adapters'
            # runtime would refuse.
            if found is not None and (config is None or found.config is config):
                self._adapters_kept.move_to_end(key)
                return found
            adapters = self._adapters_kept[key] = ModelAdapters(config or empty_config())
            while len(self._adapters_kept) > MAX_ADAPTER_SETS:
                self._adapters_kept.popitem(last=False)
            return adapters

    def _prepared(self, options: dict[str, Any], files: _FilesKey | None) -> Prepared:
        """The config and tools `options` name, loaded once per state of their `files`."""
        if files is None:  # a file is missing: the loaders say which, by name
            config = runtime_config(options)
            return config, load_tools(options, config)
        with self._lock:
            found = self._prepared_kept.get(files)
            if found is not None:
                self._prepared_kept.move_to_end(files)
                return found
        config = runtime_config(options)
        loaded = config, load_tools(options, config)
        with self._lock:
            self._prepared_kept[files] = loaded
            while len(self._prepared_kept) > MAX_PREPARED:
                self._prepared_kept.popitem(last=False)
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


__all__ = ["MAX_ADAPTER_SETS", "MAX_PREPARED", "ServeRuntimes"]
