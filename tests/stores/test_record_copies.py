"""`records.copy_record`: the copy a store hands out of a record it keeps, equal to
pydantic's deep copy, sharing nothing a caller could change with the original."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from stores.records import (
    Budget,
    ParentRef,
    RunError,
    RunRecord,
    RunStatus,
    Suspension,
    copy_record,
    json_copy,
)
from stores.sqlite import SqliteRunStore

AT = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _record() -> RunRecord:
    return RunRecord(
        run_id="r1", manifest_hash="sha256:m", status=RunStatus.SUSPENDED, attempt=2,
        manifest={"id": "agent", "steps": [{"id": "ask", "type": "prompt", "tools": ["a"]}]},
        variables={"items": [1, {"nested": ["x"]}], "flag": True, "none": None},
        budget=Budget(max_total_tokens=500), parent=ParentRef(run_id="p", step_path="s"),
        suspension=Suspension(reason="approval", details={"approval_id": "ap"},
                              decision={"approved": True, "by": ["ops"]}),
        error=RunError(type="x", message="m", details={"k": [1]}),
        output={"answer": [1, 2, {"deep": "y"}]}, lease_expires_at=AT,
        options={"tools": ["/t.py"]})


def _mutable_parts(record: RunRecord) -> list[object]:
    """Every dict and list of the record, and its nested records."""
    found: list[object] = []

    def walk(value: object) -> None:
        if isinstance(value, (dict, list)):
            found.append(value)
            for item in value.values() if isinstance(value, dict) else value:
                walk(item)
        elif hasattr(value, "__pydantic_fields_set__"):
            found.append(value)
            for item in value.__dict__.values():
                walk(item)

    walk(record)
    return found[1:]  # the record itself is checked apart


def test_a_copy_equals_pydantics_deep_copy_and_shares_nothing_mutable() -> None:
    record = _record()
    before = record.model_copy(deep=True)
    copied = copy_record(record)
    assert copied == record.model_copy(deep=True) == record
    assert copied is not record
    assert copied.model_fields_set == record.model_fields_set
    originals = {id(part) for part in _mutable_parts(record)}
    assert len(originals) > 10
    assert not originals & {id(part) for part in _mutable_parts(copied)}
    copied.variables["items"][1]["nested"].append("changed")
    assert copied.suspension is not None and copied.suspension.decision is not None
    copied.suspension.decision["by"].append("someone")
    assert record == before


def test_json_copy_shares_immutable_leaves_and_copies_containers() -> None:
    value = {"at": AT, "status": RunStatus.RUNNING, "list": [1, "s", None, {"x": 1.5}]}
    copied = json_copy(value)
    assert copied == value
    assert copied["at"] is AT and copied["status"] is RunStatus.RUNNING
    assert copied["list"] is not value["list"] and copied["list"][3] is not value["list"][3]


def test_a_run_loaded_twice_is_two_independent_copies(tmp_path: Path) -> None:
    store = SqliteRunStore(tmp_path / "runs.sqlite")
    store.create_run(RunRecord(run_id="r1", manifest_hash="sha256:m",
                               variables={"items": [1]}, options={"o": {"k": []}}))
    first, second = store.load_run("r1"), store.load_run("r1")
    assert first is not None and second is not None
    first.variables["items"].append(2)
    first.options["o"]["k"].append(1)
    assert second.variables == {"items": [1]} and second.options == {"o": {"k": []}}
    reloaded = store.load_run("r1")
    assert reloaded is not None and reloaded.variables == {"items": [1]}
