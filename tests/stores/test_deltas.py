"""Checkpoint bodies: a step's output that a variable also holds is stored once, and a
body holds nothing it need not (a delta only where it is shorter, no empty continuation)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stores.deltas import (
    BODY_FORMAT,
    SHARED_OUTPUTS_FORMAT,
    VARIABLES_DELTA_FORMAT,
    DeltaFormatError,
    assemble,
    assemble_each,
    encode_body,
)
from stores.records import Checkpoint, Frame, RunRecord
from stores.sqlite import SqliteRunStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OUTPUTS = [f"answer {index}: " + "x" * 40 for index in range(200)]


def _checkpoint(seq: int, variables: dict[str, Any], results: list[dict[str, Any]]) -> Checkpoint:
    return Checkpoint(run_id="r", seq=seq, attempt=1, manifest_hash="sha256:m",
                      variables=variables, step_results=results,
                      created_at=NOW + timedelta(seconds=seq))


def _loop_finished(output: Any, variable: Any,
                   loop_outputs: Any = None) -> tuple[Checkpoint, Checkpoint]:
    """Checkpoint 1 inside a loop; checkpoint 2 after it, its output saved as a step
    result, in the `handled` variable (`variable`) and in `loop.outputs`."""
    first = [{"kind": "iteration", "step_path": "each/0", "status": "completed",
              "output": "answer 0"}]
    one = _checkpoint(1, {"items": [1, 2]}, first)
    done = {"kind": "step", "step_path": "each", "step_id": "each", "depth": 0,
            "status": "completed", "output": output}
    loop = {"index": 1, "outputs": loop_outputs, "goalMet": False}
    two = _checkpoint(2, {"items": [1, 2], "handled": variable, "loop": loop}, [*first, done])
    return one, two


def test_a_variable_holding_a_new_step_results_output_is_stored_once() -> None:
    outputs = list(OUTPUTS)
    # The same object three times, as the engine holds a finished loop's output.
    one, two = _loop_finished(outputs, outputs, outputs)
    first, saved = encode_body(one, None)
    second, _ = encode_body(two, saved)
    assert json.loads(second)["format"] == SHARED_OUTPUTS_FORMAT
    assert second.count(OUTPUTS[-1]) == 1
    assembled, _ = assemble([first, second])
    assert assembled == two
    assert [checkpoint.variables for checkpoint in assemble_each([first, second], first=1)] \
        == [one.variables, two.variables]


def test_an_equal_value_that_is_another_object_is_written_as_itself() -> None:
    one, two = _loop_finished(list(OUTPUTS), list(OUTPUTS))
    _, saved = encode_body(one, None)
    second, _ = encode_body(two, saved)
    assert json.loads(second)["format"] == VARIABLES_DELTA_FORMAT
    assert second.count(OUTPUTS[-1]) == 2
    assert assemble([encode_body(one, None)[0], second])[0] == two


@pytest.mark.parametrize(("reference", "complaint"), [
    ([["handled"], 1], "shares variable 'handled'"),
    ([["handled"], -1], "shares variable 'handled'"),
    ([["handled"], "0"], "shares variable 'handled'"),
    ([["handled"], True], "shares variable 'handled'"),
    ([["items", "x"], 0], "not an object"),
    ([[], 1], "malformed shared output"),
    ([["loop", "outputs", "deeper"], 1], "malformed shared output"),
    ("handled", "malformed shared output"),
])
def test_a_reference_to_no_step_result_output_is_malformed(reference: Any,
                                                           complaint: str) -> None:
    outputs = list(OUTPUTS)
    one, two = _loop_finished(outputs, outputs)
    first, saved = encode_body(one, None)
    second = json.loads(encode_body(two, saved)[0])
    assert second["variables"]["outputs"] == [[["handled"], 0]]
    second["variables"]["outputs"] = [reference]
    with pytest.raises(DeltaFormatError, match=complaint):
        assemble([first, json.dumps(second)])


def test_the_sqlite_store_reads_back_what_it_stored_once(tmp_path: Path) -> None:
    outputs = list(OUTPUTS)
    one, two = _loop_finished(outputs, outputs, outputs)
    with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        store.create_run(RunRecord(run_id="r", manifest_hash="sha256:m"))
        store.resume_run("r", owner="o", now=NOW, lease_seconds=60)
        store.save_checkpoint(one, expected_attempt=1)
        store.save_checkpoint(two, expected_attempt=1)
        infos = store.list_checkpoints("r")
        assert infos[1].size_bytes < len(json.dumps(OUTPUTS)) * 1.5
    with SqliteRunStore(tmp_path / "runs.sqlite") as reopened:  # no cache: read from the file
        assert reopened.load_latest_checkpoint("r") == two
        assert reopened.load_checkpoints("r", 1, 2) == [one, two]


def test_variables_that_all_change_are_stored_as_themselves_not_as_a_delta() -> None:
    # A loop's counter, the only variable, changes at every commit point: a
    # delta of it would be the same value with `set` and `unset` around it.
    one = _checkpoint(1, {"step": 1}, [])
    two = _checkpoint(2, {"step": 2}, [])
    first, saved = encode_body(one, None)
    second, _ = encode_body(two, saved)
    stored = json.loads(second)
    assert stored["format"] == BODY_FORMAT
    assert stored["head"]["variables"] == {"step": 2}
    assert "variables" not in stored
    assert assemble([first, second])[0] == two
    assert [checkpoint.variables for checkpoint in assemble_each([first, second], first=1)] \
        == [{"step": 1}, {"step": 2}]


def test_a_change_to_some_variables_is_still_stored_as_a_delta() -> None:
    one = _checkpoint(1, {"items": OUTPUTS, "step": 1}, [])
    two = _checkpoint(2, {"items": OUTPUTS, "step": 2}, [])
    first, saved = encode_body(one, None)
    second, _ = encode_body(two, saved)
    stored = json.loads(second)
    assert stored["format"] == VARIABLES_DELTA_FORMAT
    assert stored["variables"] == {"set": {"step": 2}, "unset": []}
    assert OUTPUTS[0] not in second
    assert assemble([first, second])[0] == two


def test_a_frame_without_continuation_is_stored_without_one_and_read_back_empty() -> None:
    frames = [Frame(step_path="each", step_id="each", step_index=0, continuation={"index": 3}),
              Frame(step_path="each/ask", step_id="ask", step_index=0, loop_iteration=3)]
    checkpoint = Checkpoint(run_id="r", seq=1, attempt=1, manifest_hash="sha256:m",
                            cursor=frames, created_at=NOW)
    body, _ = encode_body(checkpoint, None)
    cursor = json.loads(body)["head"]["cursor"]
    assert cursor[0]["continuation"] == {"index": 3}
    assert "continuation" not in cursor[1]
    loaded = assemble([body])[0]
    assert loaded == checkpoint
    assert loaded.cursor[1].continuation == {}


def _pydantic_head(checkpoint: Checkpoint, excluded: set[str]) -> str:
    """The head as pydantic writes it: what `encode_body` must write, byte for byte."""
    exclude: dict[Any, Any] = dict.fromkeys(excluded | {"step_results", "transcript",
                                                        "artifacts", "events"}, True)
    empty = {index: {"continuation"} for index, frame in enumerate(checkpoint.cursor)
             if not frame.continuation}
    if empty:
        exclude["cursor"] = empty
    return checkpoint.model_dump_json(exclude=exclude, exclude_none=True)


@pytest.mark.parametrize("budget", [{"max_total_tokens": None, "consumed_tokens": 0},
                                    {"max_total_tokens": 500, "consumed_tokens": 40}])
def test_a_head_is_the_text_pydantic_writes_for_the_record(budget: dict[str, Any]) -> None:
    cursor = [Frame(step_path="", step_id="", step_index=0),
              Frame(step_path="each", step_id="each", step_index=0, child_index=0,
                    continuation={"count": 3, "next": 1, "previousIndex": None,
                                  "lastOutput": "é\u2028 \"quoted\""}),
              Frame(step_path="each/1/ask", step_id="ask", step_index=0, loop_iteration=1,
                    continuation={"pending": [{"arguments": {"x": [1.5, None, True]}}]},
                    continuation_version=2)]
    one = Checkpoint(run_id="r", seq=1, attempt=2, manifest_hash="sha256:m", cursor=cursor,
                     variables={"items": [1, 2], "ratio": float("nan"), "text": "ü"},
                     budget=budget, created_at=NOW)
    first, saved = encode_body(one, None)
    assert _pydantic_head(one, set()) in first
    # The next checkpoint leaves out every field that did not change.
    two = one.model_copy(update={"seq": 2})
    second, _ = encode_body(two, saved)
    assert _pydantic_head(two, {"run_id", "attempt", "manifest_hash", "contract_version",
                                "runtime_version", "variables"}) in second
