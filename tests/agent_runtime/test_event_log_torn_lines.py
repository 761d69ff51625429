"""A writer killed mid-line leaves a fragment in the event log; the next writer
ends it, and every reader leaves the fragment out without losing the events
around it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent_runtime.cli import main
from agent_runtime.events import Event, JsonlEventSink, read_events


def _event(sequence: int) -> Event:
    return Event(id=f"e{sequence}", run_id="r1", attempt=1, sequence=sequence,
                 timestamp=datetime(2026, 1, 1, tzinfo=UTC), type="step.started", data={})


def _log_with_a_torn_line(path: Path) -> None:
    first = JsonlEventSink(path)
    first.emit(_event(1))
    first.close()
    with path.open("ab") as log:  # what a writer killed mid-write leaves
        log.write(b'{"id":"e2","run_id":"r1","attempt":1,"seq')
    second = JsonlEventSink(path)
    second.emit(_event(3))
    second.close()


def test_the_next_writer_ends_a_torn_line_and_readers_skip_it(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    _log_with_a_torn_line(path)
    assert path.read_bytes().count(b"\n") == 3
    assert [event.sequence for event in read_events(path)] == [1, 3]


def test_the_events_command_prints_the_events_around_a_torn_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "events.jsonl"
    _log_with_a_torn_line(path)
    assert main(["events", str(path), "--format", "ndjson"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [event["sequence"] for event in printed] == [1, 3]
