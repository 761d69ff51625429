"""What the host-policy tests share: a runtime under a policy, and a record of every
file the process opens and every address it connects to while a check runs.

`opened()` is a context manager backed by a process-wide audit hook (Python's
`sys.addaudithook`, which cannot be removed): the hook records only while a
recording is active, so it costs the rest of the suite one attribute check
per audited event.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent_runtime import AgentRuntime
from agent_runtime.config import RuntimeConfig, parse_config
from agent_runtime.manifest import AgentManifest, parse_agent_manifest
from agent_runtime.policy import HostPolicy
from agent_runtime.testing import FakeClock
from stores.memory import MemoryRunStore


class _Recorder:
    def __init__(self) -> None:
        self.active: list[list[tuple[str, str]]] = []
        self.lock = threading.Lock()

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active or event not in ("open", "socket.connect"):
            return
        target = str(args[0]) if event == "open" else str(args[1])
        with self.lock:
            for record in self.active:
                record.append((event, target))


_RECORDER = _Recorder()
sys.addaudithook(_RECORDER.hook)


@contextmanager
def opened() -> Iterator[list[tuple[str, str]]]:
    """Every ("open", path) and ("socket.connect", address) inside the block."""
    record: list[tuple[str, str]] = []
    _RECORDER.active.append(record)
    try:
        yield record
    finally:
        _RECORDER.active.remove(record)


def agent(*steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "policy-test", "steps": list(steps), **extra}


def parsed(data: dict[str, Any]) -> AgentManifest:
    return parse_agent_manifest(data, source="test")


def prompt(step_id: str = "ask", **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "prompt", "prompt": "hello", **extra}


def scripted_model(path: str | Path) -> dict[str, str]:
    return {"provider": "scripted", "model": str(path)}


def inline_child(inner: dict[str, Any], depth: int) -> dict[str, Any]:
    """`inner` (an agent manifest) as the child of `depth` nested inline sub-runs."""
    manifest = inner
    for level in range(depth):
        manifest = agent({"id": f"level{level}", "type": "sub-run", "manifest": manifest},
                         id=f"wrapper{level}")
    return manifest


def runtime(tmp_path: Path, policy: HostPolicy | None = None,
            config: dict[str, Any] | None = None) -> AgentRuntime:
    parsed_config: RuntimeConfig | None = None
    if config is not None:
        parsed_config = parse_config({"version": "1.0", **config}, source="config")
    return AgentRuntime(store=MemoryRunStore(), clock=FakeClock(), base_dir=tmp_path,
                        policy=policy, config=parsed_config, owner="policy-test")


# Hooks a policy names by "module:function" (this module is importable by name).
def only_lookup(tool: str, tenant: str | None) -> bool:
    return tool == "lookup" and tenant != "blocked"


def no_connections(alias: str, connection: str, tenant: str | None) -> bool:
    return False


def broken_hook(tool: str, tenant: str | None) -> bool:
    raise RuntimeError("the host's check is down")
