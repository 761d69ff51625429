"""Graceful interrupts of a CLI run (docs/design.md section 6).

The first SIGINT (Ctrl-C) or SIGTERM asks the runtime to stop
(`AgentRuntime.interrupt`): no new model request, tool call or step starts;
the call in flight may finish within `--grace-seconds`, its result is
checkpointed, and the run suspends with reason `interrupted`, its lease
released, so `agent-runtime resume RUN_ID` continues at once.

A second signal, or a call still running when the grace is over, exits the
process immediately (exit 130). The run is then left as after a crash: its
owner (this host and pid) is gone, which `resume --allow-running-takeover`
and `reconcile` on this host confirm without waiting for the lease.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

EXIT_INTERRUPTED = 130
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class GracefulInterrupts:
    """Signal handlers for one command: the first signal asks, the second one exits."""

    def __init__(self, interrupt: threading.Event, grace_seconds: float, *,
                 describe: Callable[[], str]) -> None:
        self.interrupt = interrupt
        self.grace_seconds = grace_seconds
        self.describe = describe  # what to tell the user about the run, when exiting hard
        self._timer: threading.Timer | None = None

    @property
    def requested(self) -> bool:
        return self.interrupt.is_set()

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.interrupt.is_set():
            self._exit_now(f"{name} again: exiting now")
            return
        self.interrupt.set()
        _say(f"{name}: stopping at the next commit point; a call in flight may finish "
             f"within {self.grace_seconds:g}s (send it again to exit now)")
        self._timer = threading.Timer(self.grace_seconds, self._exit_now,
                                      args=(f"still busy after {self.grace_seconds:g}s",))
        self._timer.daemon = True
        self._timer.start()

    def _exit_now(self, why: str) -> None:
        _say(f"{why}; {self.describe()}")
        os._exit(EXIT_INTERRUPTED)  # immediately: no cleanup may wait on the run

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"agent-runtime: {text}\n")
        sys.stderr.flush()


@contextlib.contextmanager
def graceful_interrupts(interrupt: threading.Event, grace_seconds: float, *,
                        describe: Callable[[], str]) -> Iterator[GracefulInterrupts]:
    """Install the handlers for the duration of a run (main thread only), then restore."""
    handlers = GracefulInterrupts(interrupt, grace_seconds, describe=describe)
    if threading.current_thread() is not threading.main_thread():
        yield handlers  # signals reach only the main thread: nothing to install
        return
    previous = {sig: signal.signal(sig, handlers.handle) for sig in SIGNALS}
    try:
        yield handlers
    finally:
        handlers.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
