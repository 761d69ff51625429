"""Records stored before a field was retired still read: `RunRecord.engine`
({kind, execution_id}) was never written by any engine and is gone, and a run
record that still carries it decodes, without it, from JSON text (SQLite and
file stores) and from a mapping (DynamoDB items)."""

from __future__ import annotations

import json

from stores.records import RunRecord, decode_record, encode_record

OLD = {"run_id": "run_old", "manifest_hash": "sha256:abc", "status": "suspended", "attempt": 2,
       "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
       "engine": {"kind": "local", "execution_id": None}}


def test_a_stored_run_with_the_retired_engine_field_still_reads() -> None:
    from_text = decode_record(RunRecord, json.dumps(OLD))
    from_mapping = RunRecord.model_validate(OLD)
    assert from_text == from_mapping
    assert (from_text.run_id, from_text.attempt, from_text.status.value) == \
        ("run_old", 2, "suspended")
    assert "engine" not in json.loads(encode_record(from_text))


def test_other_unknown_fields_are_still_refused() -> None:
    try:
        RunRecord.model_validate({**OLD, "engnie": {}})
    except ValueError as error:
        assert "engnie" in str(error)
    else:
        raise AssertionError("an unknown field was accepted")
