"""Run events and the sinks that receive them.

An event is `{id, run_id, attempt, sequence, timestamp, type, step_id?,
step_path?, data?}`, ordered by `(attempt, sequence)`. Event data carries ids,
timings, token counts and error codes — never prompt text, model output or
variable values — so events can go to logs and metrics safely.

Nor anything else a model chose: a tool call is named by its position in the
model's response (`call`) and its tool by `tool_sha256` (the first 12 hex
digits of the name's SHA-256, `excerpts.fingerprint`) and `tool_length`;
by its name (`tool`) only when the step offered that tool, a name the
manifest and host declared; never by the model's call id; a provider's
finish reason outside the known ones is `other`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import pydantic_core
from stores.records import JsonObject, JsonValue

from agent_runtime.clock import iso_stamp
from agent_runtime.errors import StepFailed
from agent_runtime.excerpts import escape_json_text

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    """One thing that happened in a run, numbered within its attempt (`sequence`).

    Observations, not the run's record (the checkpoints are): a sink may
    drop them, and nothing in the engine reads them back.
    """

    id: str
    run_id: str
    attempt: int
    sequence: int
    timestamp: datetime
    type: str
    step_id: str | None = None
    step_path: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id, "run_id": self.run_id, "attempt": self.attempt,
            "sequence": self.sequence, "timestamp": self.timestamp.isoformat(),
            "type": self.type,
        }
        if self.step_id is not None:
            body["step_id"] = self.step_id
        if self.step_path is not None:
            body["step_path"] = self.step_path
        if self.data:
            body["data"] = self.data
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Event:
        return cls(id=body["id"], run_id=body["run_id"], attempt=body["attempt"],
                   sequence=body["sequence"], timestamp=datetime.fromisoformat(body["timestamp"]),
                   type=body["type"], step_id=body.get("step_id"),
                   step_path=body.get("step_path"), data=body.get("data") or {})


class EventSink(Protocol):
    def emit(self, event: Event) -> None: ...


# The separate channel for model text as it streams: `(step_path, delta)`.
# Events say only that text arrived (`model.text.delta` with a count of
# characters); a live view that shows the text itself gets it here, and
# nothing here is logged or stored.
TextSink = Callable[[str, str], None]


class ListEventSink:
    """Keeps events in memory (tests, embedding)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def types(self) -> list[str]:
        return [event.type for event in self.events]


def log_line(body: JsonObject) -> bytes:
    """An event's line of a JSONL log: compact JSON, escaped like the CLI's (a log file
    is read in terminals too). Made by pydantic's encoder, a third of `json.dumps`'s
    cost (every event of a `serve` goes through here); by the standard one for text
    that is not UTF-8 (a lone surrogate), which pydantic's refuses."""
    try:
        raw = pydantic_core.to_json(body)
    except pydantic_core.PydanticSerializationError:
        text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    else:
        if raw.isascii() and b"\x7f" not in raw:  # nothing a terminal could act on
            return raw + b"\n"
        text = raw.decode()
    return (escape_json_text(text) + "\n").encode()


class CallbackEventSink:
    def __init__(self, callback: Callable[[Event], None]) -> None:
        self._callback = callback

    def emit(self, event: Event) -> None:
        self._callback(event)


class JsonlEventSink:
    """Appends one JSON object per line; a line is written whole or not at all.

    With `per_turn` (`serve`'s log), an event emitted on a thread running an
    event loop is written with the others of that loop's turn, in one write at
    the loop's next turn. The reason is the interpreter lock: a write lets it
    go, and on a loop that other threads keep busy, taking it back can wait a
    whole switch interval, which every run on the loop then waits too. A step
    emits several events; a turn's events, of all its runs, cost one such
    wait. The price: a process killed loses the lines of its last turn (the
    runs' own event logs, committed with their checkpoints, lose nothing).
    Without it (the CLI's one run: nothing contends), every event is written
    as it is emitted. Either way an event emitted off any loop is written at
    once, after any still waiting, so the file keeps the order events were
    emitted in. A write that fails after its events' emit is logged, and
    raised by the next emit (so a run whose sinks must not fail, `fail-run`,
    fails at its next event); `close` writes what still waits.
    """

    def __init__(self, path: str | Path, *, per_turn: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # O_APPEND makes each single write() land at the end even with
        # several processes appending to the same file.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._per_turn = per_turn
        self._waiting: list[bytes] = []  # lines emitted on a loop, not yet written
        # The loop whose next turn is to write them (None: none is to). Two loops
        # emitting at once each schedule a turn; the first writes for both.
        self._turn: asyncio.AbstractEventLoop | None = None
        self._failure: OSError | None = None  # a deferred write's, for the next emit
        self._end_torn_line()

    def _end_torn_line(self) -> None:
        """A writer killed mid-line (a write across a page boundary can be cut by
        SIGKILL) leaves a torn last line: end it, so the next event is a line of
        its own instead of the tail of that fragment. Readers skip the fragment."""
        with open(self.path, "rb") as log:
            log.seek(0, os.SEEK_END)
            if log.tell() == 0:
                return
            log.seek(-1, os.SEEK_END)
            torn = log.read(1) != b"\n"
        if torn:
            os.write(self._fd, b"\n")

    def emit(self, event: Event) -> None:
        line = log_line(event.to_json())
        with self._lock:
            failure, self._failure = self._failure, None
            self._waiting.append(line)
            loop = None if failure is not None or not self._per_turn else _running_loop()
            if loop is not None:
                if self._turn is not loop:  # else this loop's next turn is to write it
                    loop.call_soon(self._write_turn)
                    self._turn = loop
                return
            # No loop here: everything waiting is written now, in order (with lines
            # a loop that stopped before its turn never wrote).
            self._write_waiting()
        if failure is not None:
            raise failure

    def _write_turn(self) -> None:
        with self._lock:
            self._turn = None
            lost = len(self._waiting)
            try:
                self._write_waiting()
            except OSError as error:
                logger.warning("event log %s: %d event(s) not written", self.path, lost,
                               exc_info=True)
                self._failure = error

    def _write_waiting(self) -> None:
        """Write the lines waiting, in one write (under `_lock`)."""
        if not self._waiting:
            return
        data = b"".join(self._waiting)
        self._waiting.clear()
        written = os.write(self._fd, data)
        while written < len(data):  # a short write: the rest follows it
            written += os.write(self._fd, data[written:])

    def close(self) -> None:
        with self._lock:
            try:
                if self._fd >= 0:
                    self._write_waiting()
            finally:
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def is_torn(line: str) -> bool:
    """Whether a log line is the fragment a killed writer left: it begins as
    `JsonlEventSink` begins every line (the event's id first) and lacks the
    closing brace every whole line ends with. Anything else is not ours to skip."""
    text = line.rstrip("\r\n")
    return text.startswith('{"id":"') and not text.endswith("}")


def read_events(path: str | Path) -> Iterator[Event]:
    """Events of a JSONL file; a torn line (a killed writer's fragment) is skipped."""
    with open(path, encoding="utf-8") as source:
        for line in source:
            if not line.strip() or is_torn(line):
                continue
            yield Event.from_json(json.loads(line))


def random_id() -> str:
    """A random (version 4) UUID as 32 hex digits, like `uuid.uuid4().hex` without
    building a UUID object or asking the OS for 16 bytes each time: every event has
    one, several per commit point, and so do transcript entries and tool calls."""
    bits = _ENTROPY.take() & _UUID4_CLEAR | _UUID4_SET
    return f"{bits:032x}"


class _Entropy:
    """The OS's random bytes (`os.urandom`), read a page at a time, 16 bytes per id.

    A forked child starts with none of its parent's: it would hand out its
    parent's next ids again."""

    PAGE = 4096

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._lock = threading.Lock()
        self._page = b""
        self._used = 0

    def take(self) -> int:
        with self._lock:
            if self._used + 16 > len(self._page):
                self._page, self._used = os.urandom(self.PAGE), 0
            start = self._used
            self._used += 16
            return int.from_bytes(self._page[start:start + 16])


_ENTROPY = _Entropy()
os.register_at_fork(after_in_child=_ENTROPY.reset)


_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


class EventSinkFailed(StepFailed):
    """A sink could not take an event the run required delivered (`fail-run`): the
    step fails, and with it the run, as `event_sink_failed`."""

    def __init__(self, message: str) -> None:
        super().__init__("event_sink_failed", message)


FAIL_RUN = "fail-run"
CONTINUE = "continue"
SINK_FAILURE_POLICIES = (CONTINUE, FAIL_RUN)


@dataclass(frozen=True)
class SinkFailurePolicy:
    """What a sink's failure does, as the reference's `eventSinkFailurePolicy`:
    `continue` (the default) logs it and goes on; `fail-run` fails the run at the
    step whose event was not delivered (error `event_sink_failed`). The run's own
    `run.*` events never fail it: they follow commits a sink cannot undo, and
    `run.started` precedes any step. `on_error(error, event)` hears every failure."""

    policy: str = CONTINUE
    on_error: Callable[[Exception, Event], None] | None = None

    def __post_init__(self) -> None:
        if self.policy not in SINK_FAILURE_POLICIES:
            raise ValueError(f"event sink failure policy {self.policy!r}: expected one of "
                             f"{', '.join(SINK_FAILURE_POLICIES)}")

    def failed(self, error: Exception, event: Event) -> None:
        if self.on_error is not None:
            self.on_error(error, event)
        if self.policy == FAIL_RUN and not event.type.startswith("run."):
            raise EventSinkFailed(
                f"event {event.type} of step {event.step_path or '-'} could not be "
                f"delivered: {type(error).__name__}") from error


class EventEmitter:
    """Numbers and timestamps events and fans them out: one execution's (its run and
    attempt), or a reconciler pass's (`emit_for` each run it acts on, `common` data
    naming the pass). The one place events are numbered."""

    def __init__(self, sinks: Iterable[EventSink], *, run_id: str, attempt: int,
                 now: Callable[[], datetime], first_sequence: int = 1,
                 common: Mapping[str, JsonValue] | None = None,
                 failure: SinkFailurePolicy | None = None,
                 log: list[JsonObject] | None = None) -> None:
        self._sinks = list(sinks)
        # The run's durable event log (`RunState.events`): every event of this run is
        # appended, as JSON, to be committed with the next checkpoint.
        self._log = log
        self._failure = failure or SinkFailurePolicy()
        self._run_id = run_id
        self._attempt = attempt
        self._now = now
        # The time as text, for an event only the log keeps.
        self._stamp = iso_stamp(now)
        self._sequence = first_sequence - 1
        self._common = dict(common or {})
        self._lock = threading.Lock()

    @property
    def listening(self) -> bool:
        """Whether any sink or the run's log receives events: when none does, none is built."""
        return bool(self._sinks) or self._log is not None

    def emit(self, type_: str, *, step_id: str | None = None, step_path: str | None = None,
             **data: JsonValue) -> Event | None:
        if not self._sinks and self._log is None:  # as emit_for, without passing data on
            return None
        event = self._numbered(self._run_id, self._attempt, type_, (step_id, step_path, data))
        if event is not None:
            self._fan_out(event)
        return event

    def record(self, type_: str, *, step_id: str | None = None, step_path: str | None = None,
               **data: JsonValue) -> Event | None:
        """An event of this run numbered and appended to its log, not yet delivered:
        for the run's end or suspension, whose event must ride in the write that
        ends it, while the sinks hear it only once that write committed (`deliver`).
        None when no sink listens (the log has it)."""
        if not self._sinks and self._log is None:
            return None
        return self._numbered(self._run_id, self._attempt, type_,
                              (step_id, step_path, data))

    def deliver(self, event: Event | None) -> None:
        """Hand a `record`ed event to the sinks."""
        if event is not None:
            self._fan_out(event)

    def emit_for(self, run_id: str, attempt: int, type_: str, /, *,
                 step_id: str | None = None, step_path: str | None = None,
                 **data: JsonValue) -> Event | None:
        """An event about `run_id`'s `attempt`; data that is None is left out (positional
        parameters, so data may have an `attempt` of its own, as a webhook's retry does).
        None when no sink listens: no event is built (a commit point's several events
        would otherwise cost a run that nobody watches a large share of its time), only
        the run's log entry when it keeps one. Nor numbered when nothing hears it: the
        sinks and the log are fixed when the emitter is made, so no one ever sees a
        number this emitter gives."""
        if not self._sinks and self._log is None:
            return None
        event = self._numbered(run_id, attempt, type_, (step_id, step_path, data))
        if event is not None:
            self._fan_out(event)
        return event

    def _numbered(self, run_id: str, attempt: int, type_: str,
                  about: tuple[str | None, str | None, Mapping[str, JsonValue]],
                  ) -> Event | None:
        """The event, numbered and logged; None when only the log hears it (then only
        its entry is built: every commit point emits several, on the engine's hot path)."""
        step_id, step_path, data = about  # the step's id and path, the event's data
        kept: dict[str, Any] = {k: v for k, v in data.items() if v is not None}
        if self._common:
            kept = {**self._common, **kept}
        # An id and a datetime only for an event a sink hears: the log's own entries
        # are named by their cursor on reading (`stores.event_log.event_id`), so one
        # the log alone keeps costs neither the id nor its ~40 stored bytes.
        if self._sinks:
            event_id: str | None = random_id()
            timestamp = self._now()
            stamped = timestamp.isoformat()
        else:
            event_id, stamped = None, self._stamp()
        log = self._log if run_id == self._run_id else None
        with self._lock:  # numbered and logged in one order
            self._sequence += 1
            sequence = self._sequence
            if log is not None:
                # Built once here, serialised once with the checkpoint that commits it;
                # without the run id: the log is the run's own (`stores.event_log`).
                entry: dict[str, Any] = {"attempt": attempt, "sequence": sequence,
                                         "timestamp": stamped, "type": type_}
                if event_id is not None:
                    entry["id"] = event_id
                if step_id is not None:
                    entry["step_id"] = step_id
                if step_path is not None:
                    entry["step_path"] = step_path
                if kept:
                    entry["data"] = kept
                log.append(entry)
        if event_id is None:
            return None
        return Event(id=event_id, run_id=run_id, attempt=attempt, sequence=sequence,
                     timestamp=timestamp, type=type_, step_id=step_id, step_path=step_path,
                     data=kept)

    def _fan_out(self, event: Event) -> None:
        type_ = event.type
        for sink in self._sinks:
            try:
                sink.emit(event)
            except Exception as error:
                # By default events are observations, not the run's record: a sink
                # that fails (a full disk, a closed pipe) must not fail or mask the run.
                logger.warning("event sink %s failed on %s of run %s", type(sink).__name__,
                               type_, self._run_id, exc_info=True)
                self._failure.failed(error, event)
