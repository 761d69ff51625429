"""What the in-process tests of `serve`'s launcher and reconciler loop share: a memory store
that can refuse commits, a fake clock, a model whose answers wait for the test, and
runtimes built per attempt as serve builds them.

Runs execute on the launcher's own event loop: a test waits for them with
`LocalLauncher.wait` or by polling (`eventually`), with generous deadlines.
"""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from collections.abc import Callable
from typing import Any

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.api.local_launcher import LocalLauncher
from agent_runtime.events import ListEventSink
from agent_runtime.models.base import ModelRequest, ModelResponse, TextListener, Usage
from agent_runtime.testing import FakeClock
from stores.memory import MemoryRunStore
from stores.records import RunRecord

TIMEOUT = 60.0
OWNER = "serve-test:1"
MODEL = {"model": "gated/any"}

TWO_STEPS: dict[str, Any] = {"schemaVersion": "1.0", "id": "two", "steps": [
    {"id": "first", "type": "prompt", "prompt": "one", "outputVariable": "one"},
    {"id": "second", "type": "prompt", "prompt": "two", "includeInFinalOutput": True}]}
APPROVAL: dict[str, Any] = {"schemaVersion": "1.0", "id": "approval", "steps": [
    {"id": "draft", "type": "prompt", "prompt": "draft", "outputVariable": "draft"},
    {"id": "approve", "type": "approval", "prompt": "ok?", "action": "pause"},
    {"id": "final", "type": "prompt", "prompt": "final", "includeInFinalOutput": True}]}


class GatedModel:
    """Answers "done" once its gate is open (open unless a test closes it); counts
    the requests it holds at once and in all."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()
        self.in_flight = 0
        self.calls = 0

    async def generate(self, request: ModelRequest, *,
                       on_text: TextListener | None = None) -> ModelResponse:
        with self.lock:
            self.in_flight += 1
            self.calls += 1
        try:
            deadline = time.monotonic() + TIMEOUT
            while not self.gate.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        finally:
            with self.lock:
                self.in_flight -= 1
        return ModelResponse(text="done", usage=Usage(total_tokens=2))

    def holding(self, count: int) -> bool:
        """Until `count` requests are held at once."""
        return eventually(lambda: self.in_flight >= count)


class RefusingStore(MemoryRunStore):
    """A memory store whose commits (checkpoints, run ends, suspensions, reservations)
    fail as on a full disk while `refusing` is set; reads always answer."""

    def __init__(self) -> None:
        super().__init__()
        self.refusing = threading.Event()
        self.refused = 0

    def _refuse(self) -> None:
        if self.refusing.is_set():
            self.refused += 1
            raise OSError(errno.ENOSPC, "No space left on device")

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self._refuse()
        super().save_checkpoint(*args, **kwargs)

    def suspend_run(self, *args: Any, **kwargs: Any) -> None:
        self._refuse()
        super().suspend_run(*args, **kwargs)

    def complete_run(self, *args: Any, **kwargs: Any) -> None:
        self._refuse()
        super().complete_run(*args, **kwargs)

    def fail_run(self, *args: Any, **kwargs: Any) -> None:
        self._refuse()
        super().fail_run(*args, **kwargs)

    def resume_run(self, *args: Any, **kwargs: Any) -> RunRecord:
        self._refuse()
        return super().resume_run(*args, **kwargs)


class World:
    """A store, a fake clock, a gated model, and runtimes on them, one per attempt."""

    def __init__(self) -> None:
        self.store = RefusingStore()
        self.clock = FakeClock()
        self.events = ListEventSink()
        self.model = GatedModel()
        self.built = 0
        self.launchers: list[LocalLauncher] = []

    def runtime(self, owner: str = OWNER) -> AgentRuntime:
        return AgentRuntime(store=self.store, clock=self.clock, event_sinks=[self.events],
                            owner=owner, lease_seconds=30.0, models={"gated": self.model})

    def runtime_for(self, record: RunRecord) -> AgentRuntime:
        self.built += 1
        return self.runtime()

    def launcher(self, runtime_for: Callable[[RunRecord], AgentRuntime] | None = None,
                 **kwargs: Any) -> LocalLauncher:
        launcher = LocalLauncher(self.store, runtime_for or self.runtime_for, owner=OWNER,
                                 clock=self.clock, retry_first=0.01, retry_max=0.05, **kwargs)
        self.launchers.append(launcher)
        return launcher

    def create(self, manifest: dict[str, Any] = TWO_STEPS, *,
               tenant: str | None = None) -> RunRecord:
        return self.runtime().create_run(manifest=manifest, options=MODEL, tenant=tenant)

    def record(self, run_id: str) -> RunRecord:
        record = self.store.load_run(run_id)
        assert record is not None
        return record

    def status(self, run_id: str) -> RunStatus:
        return self.record(run_id).status

    def close(self) -> None:
        self.model.gate.set()
        self.store.refusing.clear()
        for launcher in self.launchers:
            launcher.shutdown(timeout=TIMEOUT)


def eventually(check: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def settle(launcher: LocalLauncher) -> None:
    assert launcher.wait(TIMEOUT) == [], "runs still executing"
