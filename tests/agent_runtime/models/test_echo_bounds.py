"""`scripted/echo`'s smallest instance is capped: sizes are known before values are made.

Issue 31: `minLength: 50000000` in an outputSchema stored a 50 MB output from
a 200-byte request. Now echo's answer is at most `MAX_ECHO_OUTPUT_BYTES` of
JSON text, and a schema that asks for more fails the model call with
`echo_output_too_large`, naming the keyword and the cap, before the value is
allocated (measured with tracemalloc).
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from agent_runtime import RunStatus
from agent_runtime.models.base import ModelError
from agent_runtime.models.smallest_instance import (
    MAX_ECHO_NUMBER_DIGITS,
    MAX_ECHO_OUTPUT_BYTES,
    MAX_ECHO_SCHEMA_DEPTH,
    smallest_instance,
)
from tests.agent_runtime.engine_harness import ECHO, Harness, manifest

CAP = f"{MAX_ECHO_OUTPUT_BYTES:,}"
# A value no message may carry: it stands for whatever a schema holds.
SECRET = "s3cr3t-value"


def peak_bytes(action: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def refusal(schema: Any) -> ModelError:
    with pytest.raises(ModelError) as caught:
        smallest_instance(schema)
    assert SECRET not in str(caught.value)
    return caught.value


@pytest.mark.parametrize(("schema", "expected"), [
    ({"type": "object", "required": ["tags", "level", "ok", "n", "free"], "properties": {
        "tags": {"type": "array", "minItems": 2, "items": {"type": "string", "minLength": 2}},
        "level": {"enum": ["low", "high"]}, "ok": {"type": "boolean"},
        "n": {"type": "integer", "minimum": 3}, "extra": {"type": "string"}}},
     {"tags": ["xx", "xx"], "level": "low", "ok": False, "n": 3, "free": ""}),
    ({"type": "number", "exclusiveMinimum": 3}, 3.5),
    ({"type": "integer", "exclusiveMinimum": 3}, 4),
    ({"type": "integer", "minimum": 2.5}, 3),
    ({"type": "integer", "minimum": 10, "exclusiveMinimum": 5}, 10),
    ({"type": "integer", "exclusiveMinimum": 2.5}, 3),
    ({"type": "integer", "minimum": 10, "exclusiveMinimum": True}, 11),  # draft 4
    ({"type": "number", "minimum": 1.0, "exclusiveMinimum": True}, 1.5),
    ({"anyOf": [{"type": "boolean"}, {"type": "null"}]}, False),
    ({"allOf": [{"type": "object"}, {"required": ["x"]}]}, {"x": ""}),
    ({"type": ["string", "null"]}, None),
    ({"const": {"é": [1, 2]}}, {"é": [1, 2]}),
    ({"default": 7, "type": "integer"}, 7),
    ({"type": "array", "items": {"type": "string"}}, []),
    ({}, ""),
    (True, None),
])
def test_ordinary_schemas_get_the_smallest_instance_as_before(schema: Any,
                                                              expected: Any) -> None:
    assert smallest_instance(schema) == expected


def test_array_items_are_separate_copies() -> None:
    value = smallest_instance({"type": "array", "minItems": 3,
                               "items": {"type": "object", "required": ["k"]}})
    assert value == [{"k": ""}] * 3
    value[0]["k"] = "changed"
    assert value[1] == {"k": ""}


def test_an_instance_of_exactly_the_cap_is_made_and_one_byte_more_is_refused() -> None:
    fits = smallest_instance({"type": "string", "minLength": MAX_ECHO_OUTPUT_BYTES - 2})
    assert len(json.dumps(fits)) == MAX_ECHO_OUTPUT_BYTES
    error = refusal({"type": "string", "minLength": MAX_ECHO_OUTPUT_BYTES - 1})
    assert error.code == "echo_output_too_large"
    # Counted as json.dumps writes it, separators included: `["x", "x"]` is 5 bytes an item.
    items = MAX_ECHO_OUTPUT_BYTES // 5
    array = {"type": "array", "minItems": items, "items": {"type": "string", "minLength": 1}}
    assert len(json.dumps(smallest_instance(array))) == 5 * items <= MAX_ECHO_OUTPUT_BYTES
    assert refusal({**array, "minItems": items + 1}).code == "echo_output_too_large"


@pytest.mark.parametrize(("keyword", "schema"), [
    ("minLength", {"type": "string", "minLength": 50_000_000}),
    ("minLength", {"type": "string", "minLength": 1e300}),
    ("minItems", {"type": "array", "minItems": 10**12, "items": {"type": "boolean"}}),
    # Each level is small; together they are 10^15 bytes.
    ("minItems", {"type": "array", "minItems": 1000, "items": {
        "type": "array", "minItems": 1000, "items": {"type": "string", "minLength": 1000}}}),
    ("required", {"type": "object", "required": [f"{SECRET}-{i}" for i in range(100)],
                  "properties": {f"{SECRET}-{i}": {"type": "string", "minLength": 1000}
                                 for i in range(100)}}),
    ("const", {"const": SECRET * 10_000}),
    ("enum", {"enum": [[SECRET] * 10_000]}),
    ("minimum", {"type": "integer", "minimum": 10 ** (MAX_ECHO_NUMBER_DIGITS + 5)}),
])
def test_a_schema_past_the_cap_is_refused_naming_the_keyword_and_the_cap(
        keyword: str, schema: dict[str, Any]) -> None:
    error = refusal(schema)
    assert error.code == "echo_output_too_large" and not error.retryable
    assert f"`{keyword}`" in str(error)
    if keyword != "minimum":
        assert CAP in str(error)
    else:
        assert f"{MAX_ECHO_NUMBER_DIGITS:,} digits" in str(error)


def test_a_schema_nested_past_the_depth_cap_is_refused_not_recursed() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_ECHO_SCHEMA_DEPTH + 1):
        schema = {"type": "object", "required": [SECRET], "properties": {SECRET: schema}}
    error = refusal(schema)
    assert error.code == "echo_output_too_large"
    assert f"deeper than {MAX_ECHO_SCHEMA_DEPTH} levels" in str(error)
    # Far past Python's recursion limit: still the same refusal, no RecursionError.
    for _ in range(5000):
        schema = {"anyOf": [schema]}
    assert refusal(schema).code == "echo_output_too_large"


@pytest.mark.parametrize("schema", [{"type": "number", "minimum": float("inf")},
                                    {"type": "integer", "exclusiveMinimum": float("nan")}])
def test_a_bound_that_is_not_a_finite_number_is_refused_by_name(schema: dict[str, Any]) -> None:
    error = refusal(schema)
    assert error.code == "echo_schema_unsupported"
    assert "not a finite number" in str(error)


def test_refusing_a_huge_instance_allocates_next_to_nothing() -> None:
    schemas = [{"type": "string", "minLength": 50_000_000},
               {"type": "array", "minItems": 10**12,
                "items": {"type": "string", "minLength": MAX_ECHO_OUTPUT_BYTES // 2}}]

    def refuse_all() -> None:
        for schema in schemas:
            with pytest.raises(ModelError):
                smallest_instance(schema)

    # The largest thing made is one item under the cap (32 KiB here).
    assert peak_bytes(refuse_all) < 4 * MAX_ECHO_OUTPUT_BYTES


def test_a_run_asking_echo_for_50_mb_fails_fast_with_small_memory() -> None:
    harness = Harness()
    agent = manifest({"id": "huge", "type": "prompt", "prompt": "Hi",
                      "outputSchema": {"type": "object", "required": ["body"], "properties": {
                          "body": {"type": "string", "minLength": 50_000_000}}}})
    harness.run(manifest({"id": "warm", "type": "prompt", "prompt": "Hi"}), options=ECHO)
    results: list[Any] = []
    peak = peak_bytes(lambda: results.append(harness.run(agent, options=ECHO)))
    result = results[0]
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "model_error"
    assert result.error["details"] == {"code": "echo_output_too_large"}
    assert "`minLength`" in result.error["message"] and CAP in result.error["message"]
    assert result.output is None
    # The run's whole attempt (engine, store, events) against 50 MB the value would need.
    assert peak < 8 * 1024 * 1024, peak
    stored = harness.store.load_run(result.run_id)
    assert stored is not None and stored.output is None
