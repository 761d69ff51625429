"""The cheap copies a commit point makes: JSON values copied apart from their
source, and event ids that are still random version-4 UUIDs."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime

from agent_runtime.events import EventEmitter, ListEventSink, random_id
from stores.records import json_copy


def test_json_copy_is_equal_and_shares_no_container_with_its_source() -> None:
    source = {"outputs": [{"text": "a", "n": 1, "ok": True, "none": None, "f": 1.5}],
              "nested": {"list": [[1, 2], {"k": "v"}]}}
    copied = json_copy(source)
    assert copied == source
    copied["outputs"][0]["text"] = "changed"
    copied["nested"]["list"][0].append(3)
    copied["nested"]["list"][1]["k"] = "w"
    assert source == {"outputs": [{"text": "a", "n": 1, "ok": True, "none": None, "f": 1.5}],
                      "nested": {"list": [[1, 2], {"k": "v"}]}}


def test_json_copy_deep_copies_what_is_not_plain_json() -> None:
    class Box:
        def __init__(self) -> None:
            self.items = [1]

    box = Box()
    copied = json_copy({"box": box})
    assert copied["box"] is not box and copied["box"].items == [1]
    assert copied["box"].items is not box.items


def test_event_ids_are_distinct_version_4_uuids() -> None:
    sink = ListEventSink()
    emitter = EventEmitter([sink], run_id="r", attempt=1, now=lambda: datetime.now(UTC))
    for _ in range(500):
        emitter.emit("step.started")
    ids = [event.id for event in sink.events]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(hex=value)
        assert len(value) == 32 and parsed.hex == value
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_no_event_is_built_when_no_sink_listens() -> None:
    quiet = EventEmitter([], run_id="r", attempt=1, now=lambda: datetime.now(UTC))
    assert not quiet.listening
    assert [quiet.emit("step.started") for _ in range(3)] == [None, None, None]
    sink = ListEventSink()
    heard = EventEmitter([sink], run_id="r", attempt=1, now=lambda: datetime.now(UTC))
    assert heard.listening
    assert all(heard.emit("step.started") is not None for _ in range(3))
    assert [event.sequence for event in sink.events] == [1, 2, 3]


def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    random_id()  # the parent has a page of random bytes in hand
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child process
        os.close(reading)
        os.write(writing, ",".join(random_id() for _ in range(50)).encode())
        os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as pipe:
        theirs = set(pipe.read().split(","))
    os.waitpid(child, 0)
    ours = {random_id() for _ in range(50)}
    assert len(theirs) == 50 and not ours & theirs
    assert all(uuid.UUID(hex=value).version == 4 for value in ours | theirs)
