"""`{{ path }}` rendering: lookup rules, JavaScript-style text, and what is left alone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_runtime.templates import MISSING, render, resolve_path, template_paths, to_text

SCOPE: dict[str, Any] = {
    "briefDraft": "Draft v1",
    "Customer": {"Name": "Ada", "tags": ["vip", "beta"], "orders": [{"id": 7}], "note": None},
    "count": 3,
    "ratio": 0.5,
    "ok": True,
    "empty": "",
}


# -- resolve_path ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("briefDraft", "Draft v1"),
        ("briefdraft", "Draft v1"),
        ("BRIEFDRAFT", "Draft v1"),
        ("customer.name", "Ada"),
        ("Customer.tags.1", "beta"),
        ("customer.tags.length", 2),
        ("customer.orders.0.ID", 7),
        ("briefDraft.length", 8),
        ("customer.note", None),  # a stored null is a value, not MISSING
        ("customer.tags.2", MISSING),
        ("customer.tags.first", MISSING),
        ("customer.tags.-1", MISSING),
        ("count.length", MISSING),
        ("customer.note.anything", MISSING),
        ("nope", MISSING),
        ("nope.deeper", MISSING),
        ("customer.", MISSING),
    ],
)
def test_resolve_path(path: str, expected: Any) -> None:
    result = resolve_path(SCOPE, path)
    if expected is MISSING:
        assert result is MISSING
    else:
        assert result == expected


def test_exact_key_wins_over_a_case_insensitive_match() -> None:
    scope = {"name": "lower", "Name": "title", "NAME": "upper"}
    assert resolve_path(scope, "Name") == "title"
    assert resolve_path(scope, "NAME") == "upper"
    assert resolve_path(scope, "nAmE") == "lower"  # first key in insertion order


def test_case_sensitive_lookup_when_asked() -> None:
    assert resolve_path(SCOPE, "customer", case_insensitive=False) is MISSING
    assert resolve_path(SCOPE, "Customer.Name", case_insensitive=False) == "Ada"


@pytest.mark.parametrize(
    "path",
    ["__proto__", "constructor", "prototype", "x.__proto__", "x.constructor", "x.Prototype"],
)
def test_reserved_segments_never_resolve(path: str) -> None:
    scope = {"__proto__": 1, "constructor": 2, "prototype": 3, "x": {"__proto__": 4,
             "constructor": 5, "Prototype": 6}}
    assert resolve_path(scope, path) is MISSING


def test_a_dict_length_is_its_key_not_its_size() -> None:
    assert resolve_path({"d": {"a": 1}}, "d.length") is MISSING
    assert resolve_path({"d": {"length": 9}}, "d.length") == 9


def test_unicode_digit_is_not_an_index() -> None:
    assert resolve_path({"xs": ["a", "b", "c"]}, "xs.²") is MISSING


def test_missing_is_falsy_with_a_clear_repr() -> None:
    assert not MISSING
    assert repr(MISSING) == "MISSING"


# -- to_text ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("text", "text"),
        ("", ""),
        (None, ""),
        (MISSING, ""),
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (-12, "-12"),
        (10**30, "1000000000000000000000000000000"),
        (1.0, "1"),
        (-2.0, "-2"),
        (0.5, "0.5"),
        (-0.0, "0"),
        (123.456, "123.456"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1.5e300, "1.5e+300"),
        (1e-6, "0.000001"),
        (1.25e-6, "0.00000125"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (5e-324, "5e-324"),
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        (float("-inf"), "-Infinity"),
        ({"a": 1, "b": [1, "x"]}, '{"a":1,"b":[1,"x"]}'),
        ([1, None, True], "[1,null,true]"),
        ({"name": "Zoë"}, '{"name":"Zoë"}'),
        ([], "[]"),
        ({}, "{}"),
    ],
)
def test_to_text(value: Any, expected: str) -> None:
    assert to_text(value) == expected


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_js_number_text_round_trips(value: float) -> None:
    text = to_text(value)
    assert float(text) == value
    # JavaScript writes plain notation for 1e-6 <= |x| < 1e21 and an exponent outside it
    assert "e" not in text or not 1e-6 <= abs(value) < 1e21


# -- render ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello {{ customer.name }}!", "Hello Ada!"),
        ("Hello {{customer.name}}!", "Hello Ada!"),
        ("Hello {{\n  CUSTOMER.NAME\t}}!", "Hello Ada!"),
        ("{{ briefDraft }} / {{ BriefDraft }}", "Draft v1 / Draft v1"),
        ("[{{ missing }}] [{{ customer.missing.deeper }}]", "[] []"),
        ("note={{ customer.note }}", "note="),
        ("tags={{ customer.tags }}", 'tags=["vip","beta"]'),
        ("first={{ customer.tags.0 }} n={{ customer.tags.length }}", "first=vip n=2"),
        ("order={{ customer.orders.0 }}", 'order={"id":7}'),
        ("{{ count }} x {{ ratio }} ok={{ ok }}", "3 x 0.5 ok=true"),
        ("{{ not a path }} and {{ }} and {{a..b}} and {{ a. }}",
         "{{ not a path }} and {{ }} and {{a..b}} and {{ a. }}"),
        ("{{{ count }}}", "{3}"),
        ("{ count } {count}", "{ count } {count}"),
        ("{{ $x }}-{{ a-b }}", "dollar-dash"),
    ],
)
def test_render(text: str, expected: str) -> None:
    scope = {**SCOPE, "$x": "dollar", "a-b": "dash"}
    assert render(text, scope) == expected


def test_text_without_placeholders_is_returned_as_is() -> None:
    text = "no placeholders here, just { braces }"
    assert render(text, SCOPE) is text


def test_rendering_does_not_reinterpret_inserted_text() -> None:
    assert render("{{ a }}", {"a": "{{ b }}", "b": "nope"}) == "{{ b }}"


def test_template_paths_in_order_with_repeats() -> None:
    text = "{{ a.b }} {{ not a path }} {{C}} {{ a.b }} {{ list.0.name }}"
    assert template_paths(text) == ["a.b", "C", "a.b", "list.0.name"]
    assert template_paths("plain") == []


@given(st.text())
def test_render_without_placeholders_is_identity(text: str) -> None:
    if not template_paths(text):
        assert render(text, {}) == text



def test_an_object_renders_as_json_stringify_writes_it() -> None:
    # Integer-like keys first, 2.0 as 2, no spaces: the reference's JSON.stringify.
    scope = {"score": {"b": 2.0, "10": [1e21, 0.5], "2": None}}
    assert render("{{ score }}", scope) == '{"2":null,"10":[1e+21,0.5],"b":2}'
