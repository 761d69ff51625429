"""Fakes for users' own tests: a controllable clock and scripted models.

    clock = FakeClock()
    model = scripted(responses=[{"text": "hi"}])
    runtime = AgentRuntime(store=MemoryRunStore(), models={"scripted": model}, clock=clock)
    result = await runtime.run(manifest=..., options={"model": "scripted/test"})

The crash kit (`agent_runtime.crash_kit`, its names re-exported here) kills a
run at every commit point and checks it ends as it does uninterrupted.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from agent_runtime.crash_kit import (
    CrashTrial,
    DyingStore,
    ProcessDied,
    assert_crash_safe,
    crash_at_every_commit,
)
from agent_runtime.models.scripted import Script, ScriptedModel

SCRIPT_NAME = "test"


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)


def scripted(responses: list[dict[str, Any]] | None = None,
             by_step: dict[str, list[dict[str, Any]]] | None = None,
             name: str = SCRIPT_NAME) -> ScriptedModel:
    """A scripted model serving the given script as `scripted/<name>`."""
    model = ScriptedModel()
    model.add_script(name, Script(responses=list(responses or []), by_step=dict(by_step or {})))
    return model


__all__ = ["SCRIPT_NAME", "CrashTrial", "DyingStore", "FakeClock", "ProcessDied",
           "assert_crash_safe", "crash_at_every_commit", "scripted"]
