"""Data policy (issue 11, acceptance 6): what a model or a user chose stays out
of events, logs and messages, and never reaches a terminal raw.

A scripted model asks for a tool under a made-up name and call id, calls a
real tool with a canary argument, answers with terminal escape sequences, and
in another run gives a wrong-typed answer; a variable holds a canary too.
Everything the runtime says about those runs (events in memory, in the
JSONL log and in the runs' durable event logs, the Lambda log lines of
`LogEventSink`, run errors, and what the CLI prints in every format) may
quote a canary only as an excerpt of at most `EXCERPT_LIMIT` characters; the
tool name and call ids not at all; and no escape sequence is printed raw.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_runtime import AgentRuntime, RunStatus, tool
from agent_runtime.cli import main
from agent_runtime.cli.reports import print_result
from agent_runtime.events import JsonlEventSink, ListEventSink
from agent_runtime.excerpts import EXCERPT_LIMIT, excerpt, fingerprint, printable
from agent_runtime.manifest import parse_agent_manifest
from agent_runtime.stream import StreamView
from agent_runtime.testing import FakeClock, scripted
from functions.telemetry import LogEventSink, logger
from stores.memory import MemoryRunStore


def unique(tag: str, length: int) -> str:
    """A canary no runtime text can contain by chance: `tag` then hash digits."""
    digits = "".join(hashlib.sha256(f"{tag}:{i}".encode()).hexdigest() for i in range(64))
    return (tag + digits)[:length]


TOOL_NAME = unique("canarytool_", 40)        # a tool the model made up
CALL_IDS = [unique("canarycall_a_", 40), unique("canarycall_b_", 40)]
ARGUMENT = unique("canaryarg_", 400)         # what the model passed to a real tool
VARIABLE = unique("canaryvar_", 400)         # a user's variable value
WRONG = unique("canarywrong_", 3000)         # a wrong-typed answer
NOT_JSON = "{" + unique("canarytext_", 3000)  # an answer that is not JSON at all
ESCAPES = "\x1b]0;pwned\x07\x1b[2J"
ANSWER = f"Done.{ESCAPES}\u202e\x9b31m\nsecond line"
WHOLE = (ARGUMENT, VARIABLE, WRONG, NOT_JSON)  # may appear as an excerpt
NEVER = (TOOL_NAME, *CALL_IDS)                # may not appear at all

AGENT = {
    "schemaVersion": "1.0", "id": "canary",
    "variables": [{"key": "topic", "type": "string", "value": "default"}],
    "steps": [
        {"id": "ask", "type": "prompt", "prompt": "Look up {{ topic }}.", "tools": ["lookup"],
         "includeInFinalOutput": True},
        {"id": "confirm", "type": "approval", "prompt": "Publish the answer?"},
    ],
}


def strict(step_id: str = "grade") -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "strict",
            "steps": [{"id": step_id, "type": "prompt", "prompt": "Grade it.",
                       "outputSchema": {"type": "object", "required": ["score"],
                                        "properties": {"score": {"type": "integer"}}}}]}


ASK = [
    {"toolCalls": [{"name": TOOL_NAME, "id": CALL_IDS[0], "arguments": {"query": ARGUMENT}},
                   {"name": "lookup", "id": CALL_IDS[1], "arguments": {"query": ARGUMENT}}]},
    {"text": ANSWER},
]
TOOLS_FILE = '''
from agent_runtime import tool


@tool
def lookup(query: str) -> str:
    """Look something up."""
    raise ValueError(f"nothing matches {query}")
'''


@tool
def lookup(query: str) -> str:
    """Look something up."""
    raise ValueError(f"nothing matches {query}")


def leaks(text: str) -> list[str]:
    """The canaries `text` holds beyond what the policy allows."""
    found = [canary[:20] for canary in NEVER if canary in text]
    for canary in WHOLE:
        windows = (canary[i:i + EXCERPT_LIMIT + 1] for i in range(len(canary) - EXCERPT_LIMIT))
        if any(window in text for window in windows):
            found.append(canary[:20])
    return found


def raw_controls(text: str) -> list[str]:
    """Characters that act on a terminal, found raw in `text` (newlines are fine)."""
    return sorted({f"U+{ord(c):04X}" for c in text if c not in "\n"
                   and (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c == "\u202e")})


@pytest.fixture
def log_lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """What the Lambda functions' Powertools logger writes, DEBUG included."""
    captured = io.StringIO()
    for handler in logger.handlers:
        if isinstance(handler, logging.StreamHandler):
            monkeypatch.setattr(handler, "stream", captured)
    previous = logger.log_level
    logger.setLevel("DEBUG")
    try:
        yield captured
    finally:
        logger.setLevel(previous)


def test_events_logs_and_errors_carry_no_canary(tmp_path: Path,
                                                 log_lines: io.StringIO) -> None:
    events = ListEventSink()
    jsonl = JsonlEventSink(tmp_path / "events.jsonl")
    terminal = io.StringIO()
    view = StreamView(terminal)
    model = scripted(by_step={"ask": ASK, "grade": [{"json": {"score": WRONG}}],
                              "text": [{"text": NOT_JSON}]})
    runtime = AgentRuntime(store=MemoryRunStore(), models={"scripted": model}, tools=[lookup],
                           event_sinks=[events, jsonl, LogEventSink(), view],
                           clock=FakeClock(), text_sink=view.text)
    options = {"model": "scripted/test"}

    asked = runtime.run_sync(manifest=parse_agent_manifest(AGENT, source="test"),
                             variables={"topic": VARIABLE}, options=options)
    assert asked.status is RunStatus.SUSPENDED
    runtime.approve(asked.run_id, approved=True)
    done = runtime.run_sync(run_id=asked.run_id, resume=True)
    assert done.status is RunStatus.COMPLETED and done.output == ANSWER
    wrong = runtime.run_sync(manifest=parse_agent_manifest(strict(), source="test"),
                             options=options)
    not_json = runtime.run_sync(manifest=parse_agent_manifest(strict("text"), source="test"),
                                options=options)
    jsonl.close()

    # the model really did use these names: a leak would be seen
    record = runtime.store.load_run(asked.run_id)
    assert record is not None and record.variables["topic"] == VARIABLE
    sent = json.dumps([r.messages for r in model.requests if r.step_id == "ask"])
    assert TOOL_NAME in sent and CALL_IDS[0] in sent and ARGUMENT in sent
    effects = runtime.store.list_effects(asked.run_id)
    assert [e.result["error"]["message"] for e in effects if e.result] == [
        f"ValueError: {excerpt(f'nothing matches {ARGUMENT}')}"]

    # events: the tool by a fingerprint and a length, the call by its position; the
    # offered tool by its name too, the made-up one never
    tool_events = [e for e in events.events if e.type.startswith("model.tool.")]
    assert [e.data.get("tool") for e in tool_events] == [None, "lookup", None, "lookup",
                                                         "lookup"]
    assert [(e.type, e.data["call"], e.data["tool_sha256"], e.data["tool_length"])
            for e in tool_events] == [
        ("model.tool.requested", 0, fingerprint(TOOL_NAME), len(TOOL_NAME)),
        ("model.tool.requested", 1, fingerprint("lookup"), len("lookup")),
        ("model.tool.completed", 0, fingerprint(TOOL_NAME), len(TOOL_NAME)),
        ("model.tool.started", 1, fingerprint("lookup"), len("lookup")),
        ("model.tool.completed", 1, fingerprint("lookup"), len("lookup"))]
    assert [e.data.get("error_type") for e in tool_events] == [
        None, None, "unknown_tool", None, "tool_error"]
    every_event = json.dumps([e.to_json() for e in events.events], ensure_ascii=False)
    assert leaks(every_event) == []
    assert leaks((tmp_path / "events.jsonl").read_text(encoding="utf-8")) == []
    # the runs' durable event logs (what GET /runs/{runId}/events serves): the events
    # the sinks heard, and no prompt, output, variable or tool argument either
    stored = [event for run in (asked, wrong, not_json)
              for event in runtime.store.list_events(run.run_id, limit=1000)]
    assert {event.type for event in stored} >= {"run.started", "model.tool.requested",
                                                 "model.text.delta", "run.completed"}
    assert {event.id for event in stored} <= {event.id for event in events.events}
    stored_text = json.dumps([event.model_dump(mode="json") for event in stored],
                             ensure_ascii=False)
    assert leaks(stored_text) == [] and raw_controls(stored_text) == []
    assert "second line" not in stored_text and "Look up" not in stored_text
    logged = log_lines.getvalue()
    assert "model.tool.requested" in logged and "model.text.delta" in logged
    assert leaks(logged) == [] and raw_controls(logged) == []

    # errors: the schema path and keyword, and an excerpt of the answer
    assert wrong.status is RunStatus.FAILED and wrong.error is not None
    assert wrong.error["type"] == "output_schema_invalid"
    assert wrong.error["message"] == (
        f"step grade: output does not match outputSchema at score: the value "
        f"{excerpt(WRONG)} fails 'type' (schema path properties/score/type)")
    assert not_json.error is not None and not_json.error["type"] == "output_schema_invalid"
    assert excerpt(NOT_JSON) in not_json.error["message"]
    for result in (wrong, not_json):
        assert len(json.dumps(result.error)) < 400
        assert leaks(json.dumps(result.error)) == []

    # the live view shows the model's text (that is what it is for), escaped
    live = terminal.getvalue()
    assert raw_controls(live) == [] and printable(ESCAPES) in live
    assert TOOL_NAME not in live and not any(call in live for call in CALL_IDS)
    assert "tool call 2 lookup" in live and f"unknown tool {fingerprint(TOOL_NAME)}" in live
    # the printed results: no canary beyond an excerpt, the answer escaped
    printed = io.StringIO()
    for result in (done, wrong, not_json):
        print_result(result, "pretty", printed)
        print_result(result, "json", printed)
    shown = printed.getvalue()
    assert leaks(shown) == [] and raw_controls(shown) == []
    assert printable(ESCAPES) in shown and "second line" in shown


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(AGENT))
    (tmp_path / "strict.yaml").write_text(yaml.safe_dump(strict()))
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(
        {"byStep": {"ask": ASK, "grade": [{"json": {"score": WRONG}}]}}))
    (tmp_path / "tools.py").write_text(TOOLS_FILE)
    (tmp_path / "variables.json").write_text(json.dumps({"topic": VARIABLE}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


class Screens(dict[str, tuple[str, str]]):
    """What each command printed: `(stdout, stderr)` by name."""

    def cli(self, capsys: pytest.CaptureFixture[str], name: str, *args: str) -> int:
        store = ["--store-driver", "sqlite", "--store", "runs.sqlite"]
        code = main([*args, *store] if args[0] != "events" else list(args))
        printed = capsys.readouterr()
        self[name] = (printed.out, printed.err)
        return code

    def last_json(self, name: str) -> Any:
        return json.loads(self[name][0].strip().splitlines()[-1])


def test_the_cli_prints_no_canary_and_no_raw_escape(workdir: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--model", "scripted/script.yaml", "--tools", "tools.py",
             "--events", "events.jsonl"]
    screens = Screens()

    for fmt in ("pretty", "json"):
        run_id = f"canary-{fmt}"
        code = screens.cli(capsys, f"run {fmt}", "run", "agent.yaml", "--run-id", run_id,
                           "--variables", "@variables.json", "--stream", "--format", fmt,
                           *flags)
        assert code == 10, screens[f"run {fmt}"]
        code = screens.cli(capsys, f"approve {fmt}", "approve", run_id, "--resume",
                           "--stream", "--format", fmt)
        assert code == 0, screens[f"approve {fmt}"]
        screens.cli(capsys, f"inspect {fmt}", "inspect", run_id, "--format", fmt)
        screens.cli(capsys, f"list {fmt}", "list", "--format", fmt)
        screens.cli(capsys, f"effects {fmt}", "effects", run_id, "--format", fmt)
        code = screens.cli(capsys, f"strict {fmt}", "run", "strict.yaml", "--format", fmt,
                           *flags)
        assert code == 1, screens[f"strict {fmt}"]
        code = screens.cli(capsys, f"events {fmt}", "events", "events.jsonl",
                           "--format", "ndjson" if fmt == "json" else fmt)
        assert code == 0 and "model.tool.requested" in screens[f"events {fmt}"][0]

    for name, (out, err) in screens.items():
        assert raw_controls(out + err) == [], name
        if name != "inspect json":  # the record holds the user's variables
            assert leaks(out + err) == [], name
    # the answer is shown, escaped: live, as the run's output, and in JSON
    assert printable(ESCAPES) in screens["run pretty"][1]  # the live view
    assert printable(ESCAPES) in screens["approve pretty"][0]  # the run's output
    assert screens.last_json("approve json")["output"] == ANSWER
    failure = screens.last_json("strict json")
    assert failure["error"]["type"] == "output_schema_invalid"
    assert excerpt(WRONG) in failure["error"]["message"]
    events = (workdir / "events.jsonl").read_text(encoding="utf-8")
    assert leaks(events) == [] and fingerprint(TOOL_NAME) in events


def test_an_excerpt_is_short_escaped_and_says_how_long_the_value_was() -> None:
    assert excerpt("plain") == '"plain"'
    assert excerpt({"a": [1]}) == '{"a": [1]}'
    assert excerpt(ESCAPES + "\u202e\ud800\x85") == \
        '"\\x1b]0;pwned\\x07\\x1b[2J\\u202e\\ud800\\x85"'
    long = excerpt("x" * 1000)
    assert long == '"' + "x" * EXCERPT_LIMIT + '…" (1000 chars)'
    assert excerpt("\x1b" * 100, limit=10) == '"' + "\\x1b" * 2 + '…" (100 chars)'
    assert printable("a\n\tb\r\x1b") == "a\n\tb\\r\\x1b"
    assert printable("a\nb", multiline=False) == "a\\nb"
    assert printable("plain text, café") == "plain text, café"
    assert fingerprint(TOOL_NAME) == hashlib.sha256(TOOL_NAME.encode()).hexdigest()[:12]
