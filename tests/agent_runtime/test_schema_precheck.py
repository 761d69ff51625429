"""The schema precheck says "surely valid" only of values jsonschema accepts too."""

from __future__ import annotations

from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_runtime import tool
from agent_runtime.schema_precheck import MAX_CHECKS, precheck
from agent_runtime.schemas import compile_schema

_NAMES = st.sampled_from(["a", "b", "item", "text", "n"])
_TYPE_NAMES = st.sampled_from(["string", "integer", "number", "boolean", "null", "array",
                               "object"])
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["x", "y"]))


def _schemas() -> st.SearchStrategy[Any]:
    leaf = st.one_of(
        st.just(True),
        st.builds(lambda kind: {"type": kind}, _TYPE_NAMES),
        st.builds(lambda kinds: {"type": kinds}, st.lists(_TYPE_NAMES, min_size=1, max_size=3)),
        st.builds(lambda members: {"enum": members}, st.lists(_SCALARS, min_size=1, max_size=3)),
        st.builds(lambda member: {"const": member}, _SCALARS),
    )

    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.builds(lambda props, required, extra: {
                "type": "object", "properties": props,
                "required": sorted(set(required) & set(props)),
                "additionalProperties": extra},
                st.dictionaries(_NAMES, inner, max_size=3), st.lists(_NAMES, max_size=3),
                st.one_of(st.booleans(), inner)),
            st.builds(lambda items: {"type": "array", "items": items}, inner),
            st.builds(lambda items, title: {"items": items, "title": title}, inner, st.text()),
        )

    return st.recursive(leaf, extend, max_leaves=8)


def _values() -> st.SearchStrategy[Any]:
    scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 3),
                       st.floats(allow_nan=False, allow_infinity=False, width=16),
                       st.sampled_from([1.0, 0.0, "x", "y", ""]))
    return st.recursive(scalar, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_NAMES, inner, max_size=3)),
        max_leaves=10)


@settings(max_examples=600, deadline=None)
@given(_schemas(), _values())
def test_a_value_called_surely_valid_is_valid(schema: Any, value: Any) -> None:
    surely_valid = precheck(schema)
    assert surely_valid is not None, schema  # every schema drawn is in the subset
    if surely_valid(value):
        assert jsonschema.Draft202012Validator(schema).is_valid(value), (schema, value)


_SAMPLES: list[Any] = [None, True, False, 0, 1, -2, 1.0, 1.5, float("nan"), "", "1", [], [1],
                       {}, {"a": 1}]


def test_every_type_and_constant_against_every_kind_of_value() -> None:
    schemas: list[Any] = [{"type": kind} for kind in
                          ("string", "integer", "number", "boolean", "null", "array", "object")]
    schemas += [{"enum": [member]} for member in (None, True, False, 0, 1, "", "1")]
    schemas += [{"const": member} for member in (None, True, 0, 1, "1")]
    for schema in schemas:
        surely_valid = precheck(schema)
        assert surely_valid is not None
        for value in _SAMPLES:
            if surely_valid(value):
                assert jsonschema.Draft202012Validator(schema).is_valid(value), (schema, value)
        # And it is not merely silent: it vouches for some value of its kind.
        assert any(surely_valid(value) for value in _SAMPLES), schema


def test_a_python_tools_schema_is_prechecked_and_its_failures_still_explained() -> None:
    @tool
    def lookup(item: int, text: str = "") -> str:
        """Look an item up.

        Args:
            item: The item.
            text: A note.
        """
        return text

    surely_valid = precheck(lookup.parameters)
    assert surely_valid is not None
    assert surely_valid({"item": 3}) and surely_valid({"item": 3, "text": "x"})
    # What it is not sure of, jsonschema decides and words as before.
    for arguments in ({"item": "3"}, {}, {"item": True}, {"item": 3, "other": 1}):
        assert not surely_valid(arguments)
        failure = compile_schema(lookup.parameters).failure(arguments)
        assert failure is not None and failure.startswith("at ")
    # A float with no fraction is an integer to JSON Schema: left to jsonschema, valid.
    assert not surely_valid({"item": 3.0})
    assert compile_schema(lookup.parameters).failure({"item": 3.0}) is None


def test_a_schema_beyond_the_subset_gets_no_precheck() -> None:
    for schema in ({"type": "string", "format": "email"}, {"$ref": "#/$defs/a"},
                   {"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"},
                   {"type": "string", "pattern": "^a"}, {"anyOf": [{"type": "string"}]},
                   {"type": "object", "properties": {"a": {"minLength": 1}}},
                   {"enum": [[1]]}, {"type": "decimal"}, False):
        assert precheck(schema) is None, schema


def test_a_value_too_big_to_precheck_is_left_to_jsonschema() -> None:
    surely_valid = precheck({"type": "array", "items": {"type": "integer"}})
    assert surely_valid is not None
    assert surely_valid(list(range(MAX_CHECKS // 4)))
    assert not surely_valid(list(range(MAX_CHECKS + 1)))
