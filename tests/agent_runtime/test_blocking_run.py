"""A Ctrl-C during a blocking call (`reconcile --interval`, the sync API) is a
KeyboardInterrupt wherever it lands, including the instant `asyncio.run` is
installing its own SIGINT handler."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from agent_runtime.blocking_run import run_blocking


@pytest.fixture
def sigint_while_installing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A SIGINT that arrives as asyncio's runner installs its handler, before it
    resets its interrupt count: the handler runs at once, as the signal would."""
    install = signal.signal

    def installing(signum: int, handler: Any) -> Any:
        previous = install(signum, handler)
        if signum == signal.SIGINT and callable(handler) \
                and handler is not signal.default_int_handler:
            handler(signum, None)
        return previous

    monkeypatch.setattr(asyncio.runners.signal, "signal", installing)  # type: ignore[attr-defined]
    yield


async def _a_pass() -> str:
    await asyncio.sleep(0)
    return "done"


def test_a_sigint_landing_as_the_handler_is_installed_is_an_interrupt(
        sigint_while_installing: None) -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(asyncio.CancelledError):  # what asyncio.run alone gives
        asyncio.run(_a_pass())
    with pytest.raises(KeyboardInterrupt):
        run_blocking(_a_pass())


def test_a_sigint_during_the_call_is_an_interrupt() -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    async def interrupted() -> str:
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(30)
        return "never"

    with pytest.raises(KeyboardInterrupt):
        run_blocking(interrupted())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_uninterrupted_call_returns_its_result() -> None:
    assert run_blocking(_a_pass()) == "done"
