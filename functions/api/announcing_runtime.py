"""The API's runtime: a run a client cancels gets its run-finished event, as a run
Advance ends does (functions/run_events.py).

Its own module because it subclasses the engine: functions/api/app.py imports it
when a route first needs the runtime, so a request that only reads runs never
loads the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_runtime.engine import AgentRuntime


class AnnouncingRuntime(AgentRuntime):
    """The routes' runtime, announcing each run a client cancels."""

    def __init__(self, *args: Any, announce: Callable[[str], object], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._announce = announce

    def cancel(self, run_id: str) -> None:
        super().cancel(run_id)
        self._announce(run_id)
