"""The contract's rules for the run's durable event log (`list_events`): the
checkpoints' `events`, paged by cursor, committed with the write that carries
them and gone with the run.
"""

from __future__ import annotations

from typing import Any

import pytest

from stores.base import RunNotFound, RunStore, StaleAttempt
from stores.conformance.builders import (
    ERROR,
    LEASE_SECONDS,
    NOW,
    OUTPUT,
    RUN,
    at,
    make_checkpoint,
    start_run,
)
from stores.event_log import MAX_EVENTS_PAGE
from stores.records import Checkpoint, JsonObject


def log_entry(number: int, attempt: int = 1) -> JsonObject:
    """The `number`-th entry of a run's log, as the engine appends it (no content; the
    run id is the log's own, added on reading)."""
    entry: JsonObject = {"id": f"event-{attempt}-{number}",
                         "attempt": attempt, "sequence": number,
                         "timestamp": at(number).isoformat(), "type": "step.completed",
                         "step_id": f"step-{number}", "step_path": f"step-{number}",
                         "data": {"duration_ms": number, "tokens": 0}}
    return entry


def with_events(seq: int, entries: list[JsonObject], attempt: int = 1,
                **fields: Any) -> Checkpoint:
    return make_checkpoint(seq=seq, attempt=attempt, events=entries, **fields)


def logged(count: int, attempt: int = 1) -> list[JsonObject]:
    return [log_entry(number, attempt) for number in range(1, count + 1)]


class EventLogConformance:
    """`list_events`: cursors, pages, commits, retention."""

    def test_events_of_checkpoints_are_numbered_from_one(self, store: RunStore) -> None:
        start_run(store)
        entries = logged(5)
        store.save_checkpoint(with_events(1, entries[:2]), expected_attempt=1)
        store.save_checkpoint(with_events(2, entries[:2]), expected_attempt=1)  # none new
        store.save_checkpoint(with_events(3, entries), expected_attempt=1)
        events = store.list_events(RUN, after=0, limit=100)
        assert [event.cursor for event in events] == [1, 2, 3, 4, 5]
        assert [event.id for event in events] == [entry["id"] for entry in entries]
        first = events[0]
        assert (first.run_id, first.attempt, first.sequence, first.type, first.step_path,
                first.timestamp, first.data) == (RUN, 1, 1, "step.completed", "step-1", at(1),
                                                 {"duration_ms": 1, "tokens": 0})

    def test_a_page_starts_after_its_cursor_and_holds_at_most_limit(
            self, store: RunStore) -> None:
        start_run(store)
        store.save_checkpoint(with_events(1, logged(7)), expected_attempt=1)
        assert [event.cursor for event in store.list_events(RUN, after=2, limit=3)] == [3, 4, 5]
        assert [event.cursor for event in store.list_events(RUN, after=5, limit=10)] == [6, 7]
        assert store.list_events(RUN, after=7, limit=10) == []
        assert store.list_events(RUN, after=70, limit=10) == []

    def test_a_run_without_checkpoints_has_an_empty_log(self, store: RunStore) -> None:
        start_run(store)
        assert store.list_events(RUN) == []

    def test_the_log_continues_across_attempts(self, store: RunStore) -> None:
        start_run(store)
        first = logged(3)
        store.save_checkpoint(with_events(1, first), expected_attempt=1)
        store.resume_run(RUN, owner="b", now=at(1000), lease_seconds=LEASE_SECONDS,
                         allow_running_takeover=True)
        second = [*first, log_entry(1, attempt=2), log_entry(2, attempt=2)]
        store.save_checkpoint(with_events(2, second, attempt=2), expected_attempt=2)
        events = store.list_events(RUN, after=3, limit=10)
        assert [(event.cursor, event.attempt, event.sequence) for event in events] == [
            (4, 2, 1), (5, 2, 2)]

    @pytest.mark.parametrize("end", ["suspend_run", "complete_run", "fail_run"])
    def test_events_commit_with_the_checkpoint_of_a_state_change(self, store: RunStore,
                                                                 end: str) -> None:
        start_run(store)
        store.save_checkpoint(with_events(1, logged(2)), expected_attempt=1)
        last = with_events(2, logged(4))
        if end == "suspend_run":
            store.suspend_run(RUN, expected_attempt=1, reason="approval",
                              details={"approval_id": "a"}, at=NOW, checkpoint=last)
        elif end == "complete_run":
            store.complete_run(RUN, expected_attempt=1, output=OUTPUT, at=NOW, checkpoint=last)
        else:
            store.fail_run(RUN, expected_attempt=1, error=ERROR, at=NOW, checkpoint=last)
        assert [event.cursor for event in store.list_events(RUN)] == [1, 2, 3, 4]

    def test_a_refused_write_commits_none_of_its_events(self, store: RunStore) -> None:
        start_run(store, attempts=2)
        with pytest.raises(StaleAttempt):
            store.save_checkpoint(with_events(1, logged(3)), expected_attempt=1)
        assert store.list_events(RUN) == []

    def test_a_resave_with_other_events_is_identical_and_keeps_the_first(
            self, store: RunStore) -> None:
        start_run(store)
        store.save_checkpoint(with_events(1, logged(2)), expected_attempt=1)
        retried = [log_entry(1, attempt=1) | {"id": "retried"}]
        store.save_checkpoint(with_events(1, retried), expected_attempt=1)  # a no-op
        assert [event.id for event in store.list_events(RUN)] == ["event-1-1", "event-1-2"]

    def test_list_events_of_an_unknown_run_raises_run_not_found(self, store: RunStore) -> None:
        with pytest.raises(RunNotFound):
            store.list_events("no-such-run")

    @pytest.mark.parametrize(("after", "limit"), [(-1, 10), (0, 0), (0, MAX_EVENTS_PAGE + 1)])
    def test_a_page_out_of_bounds_is_refused(self, store: RunStore, after: int,
                                             limit: int) -> None:
        start_run(store)
        with pytest.raises(ValueError, match="events"):
            store.list_events(RUN, after=after, limit=limit)

    def test_delete_run_deletes_its_events(self, store: RunStore) -> None:
        start_run(store)
        store.save_checkpoint(with_events(1, logged(3)), expected_attempt=1)
        store.complete_run(RUN, expected_attempt=1, output=OUTPUT, at=NOW,
                           checkpoint=with_events(2, logged(4)))
        store.delete_run(RUN)
        with pytest.raises(RunNotFound):
            store.list_events(RUN)
