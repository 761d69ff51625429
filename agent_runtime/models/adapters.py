"""The adapters a host builds from one runtime config: one per provider, shared.

An adapter holds what makes a model call cheap after the first: its SDK
clients and their keep-alive connections (`loop_clients`). A host that builds
a runtime per attempt (`serve`) and gave each runtime adapters of its own
opened a client and a TCP connection for every model call of every run,
because one run's calls never overlap one another. Runtimes built from the
same config share one `ModelAdapters`, so the calls of all their runs share
the clients. Whoever shares it decides with whom (`serve`: the runs of one
tenant), since an adapter may remember what a provider returned to a run
(a Gemini call's signature, by call id).
"""

from __future__ import annotations

import threading

from agent_runtime.config import RuntimeConfig, empty_config
from agent_runtime.models import build_adapter
from agent_runtime.models.base import ModelAdapter


class ModelAdapters:
    """The adapters of `config`'s providers, each built on first use (thread-safe)."""

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._built: dict[str, ModelAdapter] = {}

    @classmethod
    def matching(cls, config: RuntimeConfig | None, given: ModelAdapters | None) -> ModelAdapters:
        """A runtime's adapters: `given` (shared), else new ones for `config` (else
        an empty config). ValueError when `given` was built from another config
        than `config`: its runs would call providers that config does not name."""
        if given is None:
            return cls(config or empty_config())
        if config is not None and config is not given.config:
            raise ValueError("adapters= were built from another config than config=")
        return given

    def adapter(self, provider: str) -> ModelAdapter:
        """`provider`'s adapter (`StepFailed` when the config cannot build one)."""
        with self._lock:
            found = self._built.get(provider)
        if found is not None:
            return found
        # Built outside the lock: a driver imports its SDK the first time, which
        # takes a while; two threads racing here keep the first adapter stored.
        adapter = build_adapter(provider, self.config)
        with self._lock:
            return self._built.setdefault(provider, adapter)


__all__ = ["ModelAdapters"]
