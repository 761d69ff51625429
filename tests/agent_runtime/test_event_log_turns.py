"""The JSONL event log's writes (`events.JsonlEventSink`): per turn (serve's), the events
a loop's turn emits are written together at its next turn, in one write; an event
emitted off any loop is written at once, after those waiting; nothing waiting is lost at
`close`, on a loop that stopped, or silently on a failed write. Otherwise (the CLI's),
each event is written as it is emitted."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent_runtime import events as events_module
from agent_runtime.events import Event, JsonlEventSink, read_events


def _event(n: int) -> Event:
    return Event(id=f"e{n}", run_id="r1", attempt=1, sequence=n,
                 timestamp=datetime(2026, 1, 1, 0, 0, n, tzinfo=UTC), type="step.completed",
                 step_id="ask", step_path="ask")


def _ids(path: Path) -> list[str]:
    return [event.id for event in read_events(path)]


def test_a_turns_events_are_written_in_one_write_at_the_loops_next_turn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "events.jsonl"
    sink = JsonlEventSink(path, per_turn=True)
    writes: list[int] = []
    real_write = os.write

    def counted(fd: int, data: bytes) -> int:
        writes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(events_module.os, "write", counted)

    async def run() -> list[str]:
        for n in range(1, 4):
            sink.emit(_event(n))
        emitted = _ids(path)  # still this turn: nothing written yet
        await asyncio.sleep(0)
        return emitted

    assert asyncio.run(run()) == []
    assert _ids(path) == ["e1", "e2", "e3"]
    assert len(writes) == 1
    sink.close()


def test_an_event_emitted_off_the_loop_is_written_at_once_after_those_waiting(
        tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    sink = JsonlEventSink(path, per_turn=True)

    async def run() -> list[str]:
        sink.emit(_event(1))
        other = threading.Thread(target=sink.emit, args=(_event(2),))
        other.start()
        other.join()
        return _ids(path)  # the loop has not turned since

    assert asyncio.run(run()) == ["e1", "e2"]
    sink.close()
    assert _ids(path) == ["e1", "e2"]


def test_close_writes_the_events_still_waiting(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    sink = JsonlEventSink(path, per_turn=True)

    async def run() -> None:
        sink.emit(_event(1))
        sink.emit(_event(2))
        sink.close()  # before the loop's turn; the turn then finds nothing to write
        await asyncio.sleep(0)

    asyncio.run(run())
    assert _ids(path) == ["e1", "e2"]


def test_events_a_stopped_loop_never_wrote_go_out_with_the_next_event(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    sink = JsonlEventSink(path, per_turn=True)
    loop = asyncio.new_event_loop()

    def emit_and_stop() -> None:
        sink.emit(_event(1))  # its turn is the loop's next, which never comes
        loop.stop()

    loop.call_soon(emit_and_stop)
    loop.run_forever()
    loop.close()
    assert _ids(path) == []
    sink.emit(_event(2))  # no loop here: written at once, after the one waiting
    assert _ids(path) == ["e1", "e2"]
    sink.close()


def test_a_later_write_that_fails_is_logged_and_raised_by_the_next_emit(
        caplog: pytest.LogCaptureFixture) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full, a file every write to fails")
    sink = JsonlEventSink("/dev/full", per_turn=True)

    async def run() -> OSError:
        sink.emit(_event(1))  # waits for the turn, whose write fails
        await asyncio.sleep(0)
        with pytest.raises(OSError) as raised:
            sink.emit(_event(2))
        return raised.value

    with caplog.at_level(logging.WARNING, logger="agent_runtime.events"):
        error = asyncio.run(run())
    assert error.errno is not None and os.strerror(error.errno) in str(error)
    assert "event log /dev/full: 1 event(s) not written" in caplog.text
    sink.close()


def test_without_per_turn_each_event_is_written_as_it_is_emitted(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    sink = JsonlEventSink(path)

    async def run() -> list[str]:
        sink.emit(_event(1))
        return _ids(path)

    assert asyncio.run(run()) == ["e1"]
    sink.close()
