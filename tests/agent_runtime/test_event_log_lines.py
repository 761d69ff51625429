"""An event's line in the JSONL log (`events.log_line`): compact JSON that parses
back to the event, one line, and inert in a terminal whatever text the event
carries."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent_runtime.events import Event, JsonlEventSink, is_torn, log_line, read_events


def _body(text: str) -> dict[str, object]:
    return {"id": "e1", "run_id": "r1", "attempt": 1, "sequence": 7,
            "timestamp": "2026-01-01T00:00:00+00:00", "type": "step.completed",
            "data": {"text": text, "tokens": 60, "ratio": 0.25, "items": [1, None, True]}}


def test_an_ascii_event_is_its_compact_json_on_one_line() -> None:
    body = _body("plain words")
    line = log_line(body)
    assert line == (json.dumps(body, separators=(",", ":")) + "\n").encode()
    assert not is_torn(line.decode())


@pytest.mark.parametrize("text", ["café, 東京 and 🙂", "tab\tnew\nline\r"])
def test_text_a_terminal_shows_as_it_is_stays_readable(text: str) -> None:
    line = log_line(_body(text))
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    assert json.loads(line) == _body(text)
    assert "é" not in text or "café".encode() in line  # UTF-8, not \u escapes


@pytest.mark.parametrize("text", ["\x1b[31mred", "del\x7f", "csi\x9b2J", "bidi\u202eevil",
                                  "lone \ud800 surrogate"])
def test_text_a_terminal_could_act_on_is_escaped_and_parses_back(text: str) -> None:
    line = log_line(_body(text))
    written = line.decode("ascii")  # every such character is a \u escape
    assert json.loads(written) == _body(text)
    assert line.count(b"\n") == 1


def test_the_sink_writes_lines_that_read_back_as_the_events(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    events = [Event(id=f"e{n}", run_id="r1", attempt=1, sequence=n,
                    timestamp=datetime(2026, 1, 1, 0, 0, n, 1500, tzinfo=UTC),
                    type="model.delta", step_id="ask", step_path="ask",
                    data={"text": text}) for n, text in enumerate(["ok", "é\x9b", "\ud800"])]
    sink = JsonlEventSink(path)
    for event in events:
        sink.emit(event)
    sink.close()
    assert list(read_events(path)) == events
