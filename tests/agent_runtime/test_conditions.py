"""Conditions (`when`, loop `condition`/`goal`): the JEXL subset and its JavaScript semantics."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_runtime.conditions import (
    MAX_DEPTH,
    Condition,
    compile_condition,
    condition_identifiers,
    evaluate_condition,
    truthy,
)
from agent_runtime.errors import ConditionSyntaxError, InvalidInput

NAN = float("nan")
SCOPE: dict[str, Any] = {
    "a": {"b": "x", "list": [10, 20, 30], "Name": "Ada", "1": "one"},
    "x": 5,
    "X": "upper",
    "s": "hello",
    "n": None,
    "zero": 0,
    "key": "b",
    "items": [{"id": 1}, {"id": 2}],
    "$dollar": 1,
    "_under": 2,
    "classification": {"confidence": 0.5},
    "priority": "low",
}


def value_of(expression: str, scope: Mapping[str, Any] | None = None) -> Any:
    return compile_condition(expression).evaluate(SCOPE if scope is None else scope)


def same(actual: Any, expected: Any) -> bool:
    """Equality that also distinguishes NaN, 1 from True, and 1 from "1"."""
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(actual, float) and math.isnan(actual)
    same_kind = all(isinstance(actual, kind) == isinstance(expected, kind) for kind in (bool, str))
    return same_kind and bool(actual == expected)


def check(expression: str, expected: Any) -> None:
    actual = value_of(expression)
    assert same(actual, expected), f"{expression!r} gave {actual!r}, expected {expected!r}"


# -- literals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("3", 3),
        ("0.7", 0.7),
        (".5", 0.5),
        ("007", 7),
        ("'single'", "single"),
        ('"double"', "double"),
        ("''", ""),
        ("true", True),
        ("false", False),
        ("null", None),
        ('[1, "a", null, [true]]', [1, "a", None, [True]]),
        ("[]", []),
        ("[1, 2,]", [1, 2]),
        ('{a: 1, "b c": 2, true: 3}', {"a": 1, "b c": 2, "true": 3}),
        ("{}", {}),
        ("{a: {b: [x]}}", {"a": {"b": [5]}}),
        # Escapes follow JEXL: only the enclosing quote and the backslash itself.
        (r"'it\'s'", "it's"),
        (r'"say \"hi\""', 'say "hi"'),
        (r"'back\\slash'", "back\\slash"),
        (r"'a\nb'", "a\\nb"),
        (r"'\"'", '\\"'),
        ('"it\'s"', "it's"),
        ("'multi\nline'", "multi\nline"),
    ],
)
def test_literals(expression: str, expected: Any) -> None:
    check(expression, expected)


def test_array_literals_are_fresh_on_every_evaluation() -> None:
    condition = compile_condition("[1, 2]")
    first = condition.evaluate({})
    first.append(3)
    assert condition.evaluate({}) == [1, 2]


# -- names and member access -----------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("x", 5),
        ("X", "upper"),  # identifiers are case-sensitive...
        ("a.b", "x"),
        ("a.B", None),
        ("A.b", None),
        ("a.Name", "Ada"),
        ("a.name", None),
        ('a["b"]', "x"),
        ("a[key]", "x"),
        ("a[1]", "one"),  # a number key reads the dict's string key, as in JavaScript
        ("a.list[1]", 20),
        ('a.list["1"]', 20),
        ("a.list[1.0]", 20),
        ("a.list[5]", None),
        ("a.list[-1]", None),
        ("a.list[0.5]", None),
        ("a.list.length", 3),
        ("a['list'].length", 3),
        ("s.length", 5),
        ("s[1]", "e"),
        ("items[1].id", 2),
        ("items.length", 2),
        ("$dollar + _under", 3),
        # ...and anything missing is None, however deep (safe navigation).
        ("missing", None),
        ("missing.deep.er", None),
        ("n.x", None),
        ("x.y", None),
        ("s.y", None),
        ("a.list.first", None),
        ("a.b.c.d", None),
        ("missing[0]", None),
        ("a[missing]", None),
        ("a[[1]]", None),
    ],
)
def test_member_access(expression: str, expected: Any) -> None:
    check(expression, expected)


def test_reserved_names_never_resolve() -> None:
    scope = {"constructor": 1, "o": {"__proto__": 2, "prototype": 3}}
    assert value_of("constructor", scope) is None
    assert value_of("o.__proto__", scope) is None
    assert value_of('o["prototype"]', scope) is None


def test_keywords_are_plain_names_after_a_dot_and_inside_braces() -> None:
    scope = {"o": {"in": 1, "true": 2, "null": 3}, "In": 4}
    assert value_of("o.in + o.true + o.null", scope) == 6
    assert value_of("{{ in }}", scope) == 4
    assert value_of("x in .5", {"x": 1}) is False  # after `in`, ".5" is a number


def test_scope_may_be_any_mapping() -> None:
    assert value_of("x + 1", MappingProxyType({"x": 1})) == 2


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('{{ A.NAME }} == "Ada"', True),  # ...while {{ }} operands ignore case
        ("{{ classification.CONFIDENCE }} < 0.7", True),
        ("{{ a.list.length }}", 3),
        ("{{ a.list.2 }}", 30),
        ("{{ missing.path }} == null", True),
        ("{{x}} * 2", 10),
        ("{{ items }}[0].id", 1),
    ],
)
def test_template_operands_resolve_case_insensitively(expression: str, expected: Any) -> None:
    check(expression, expected)


# -- operators -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 == 1", True),
        ("1 == 1.0", True),
        ('1 == "1"', True),
        ('"1.0" == 1', True),
        ('" 2 " == 2', True),
        ('"0x10" == 16', True),
        ('"" == 0', True),  # JavaScript: a blank string is the number 0
        ('"abc" == 0', False),
        ("true == 1", True),
        ("false == 0", True),
        ('true == "1"', True),
        ('true == "true"', False),
        ('"a" == "a"', True),
        ('"a" == "A"', False),
        ("null == null", True),
        ("missing == null", True),
        ("null == 0", False),
        ('null == ""', False),
        ("null == false", False),
        ("0 / 0 == 0 / 0", False),
        # Lists and dicts compare by content (JavaScript compares identity).
        ("[1, [2]] == [1, [2]]", True),
        ("{a: 1, b: [2]} == {b: [2], a: 1}", True),
        ('[1] == ["1"]', False),
        ("[1] == [true]", False),
        ("[1] == 1", False),
        ("{} == []", False),
        ("a.list == [10, 20, 30]", True),
        ("x != null", True),
        ("n != null", False),
        ("1 != 2", True),
        ('1 != "1"', False),
    ],
)
def test_equality(expression: str, expected: bool) -> None:
    check(expression, expected)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 < 2", True),
        ("2 <= 2", True),
        ("3 > 2", True),
        ("2 >= 3", False),
        ('"a" < "b"', True),
        ('"B" < "a"', True),
        ('"10" < "9"', True),  # two strings compare as text
        ('10 < "9"', False),  # otherwise as numbers
        ('"10" > 9', True),
        ("true > false", True),
        ("null < 1", True),
        ("null >= 0", True),
        ("null <= null", True),
        ("missing < 1", True),
        ('null < "1"', True),
        ('"abc" < 1', False),
        ('"abc" >= 1', False),
        ("1 < 0 / 0", False),
        ("0 / 0 >= 0 / 0", False),
        ("[1] < 2", False),
        ("{} >= {}", False),
        ("1 / 0 > 10", True),
    ],
)
def test_comparison(expression: str, expected: bool) -> None:
    check(expression, expected)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2", 3),
        ("0.1 + 0.2", 0.30000000000000004),
        ('"a" + 1', "a1"),
        ('1 + "a"', "1a"),
        ('"v" + 1.0', "v1"),
        ('"v" + 0.5', "v0.5"),
        ('"n=" + null', "n="),  # text uses templates.to_text, so null adds nothing
        ('"x" + [1, 2]', "x[1,2]"),
        ('"x" + {a: 1}', 'x{"a":1}'),
        ('"x" + true', "xtrue"),
        ("1 + true", 2),
        ("null + 1", 1),
        ("[1] + 1", NAN),
        ("7 - 2", 5),
        ('"7" - 2', 5),
        ('"a" - 1', NAN),
        ("2 * 3", 6),
        ('"2" * "3"', 6),
        ("7 / 2", 3.5),
        ("1 / 0", math.inf),
        ("-1 / 0", -math.inf),
        ("1 / -0.0", -math.inf),
        ("0 / 0", NAN),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 // 0", math.inf),
        ("7 % 3", 1),
        ("-7 % 3", -1),  # the sign follows the dividend, as in JavaScript
        ("7 % -3", 1),
        ("7.5 % 2", 1.5),
        ("7 % 0", NAN),
        ("-x", -5),
        ("- -2", 2),
        ('-"3"', -3),
        ("-null", 0),
        ('-"a"', NAN),
        ("x-1", 4),
        ("x - -1", 6),
        ("2 + 3 * 4", 14),
        ("(2 + 3) * 4", 20),
        ("10 - 2 - 3", 5),
        ("12 / 2 / 3", 2),
        ("-2 * 3", -6),
        ("-a.list[0]", -10),
        ("1" + "0" * 400 + " * 1.5", math.inf),  # past the double range: JavaScript's Infinity
    ],
)
def test_arithmetic(expression: str, expected: Any) -> None:
    check(expression, expected)


HUGE = int("9" * 400)  # a variable's JSON integer past the double range


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("!(-huge) < 1", True),  # a huge integer is truthy without becoming a float
        ("-huge < 0", True),
        ("huge + 1", math.inf),  # as JavaScript reads it: Infinity
        ("-huge * " + "9" * 400, -math.inf),
        ("huge - huge", NAN),  # Infinity - Infinity
        ("huge % 2", NAN),
        ("huge / huge", NAN),
        ("-(-huge) > " + "9" * 300, True),
        ("huge == huge", True),
    ],
)
def test_a_huge_integer_variable_is_javascripts_number(expression: str, expected: Any) -> None:
    """A reference port (46 generated cases) negated huge integers: OverflowError, not a
    number, until variables' integers were read as JavaScript reads them."""
    actual = compile_condition(expression).evaluate({"huge": HUGE})
    assert same(actual, expected), f"{expression!r} gave {actual!r}, expected {expected!r}"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('"ell" in "hello"', True),
        ('"ELL" in "hello"', False),
        ('"" in "hello"', True),
        ('"z" in s', False),
        ('1 in "a1"', True),
        ("1 in [1, 2]", True),
        ('"1" in [1, 2]', False),  # list membership is strict, as JEXL's `in`
        ("true in [1]", False),
        ("null in [null]", True),
        ("[1] in [[1], [2]]", True),
        ("{a: 1} in [{a: 1}]", True),
        ('"b" in a', True),  # a dict: key membership
        ('"z" in a', False),
        ("1 in a", True),
        ("1 in 5", False),
        ("x in missing", False),
        ("10 in a.list", True),
        ('"vip" in {{ A.tags }}', False),
    ],
)
def test_in(expression: str, expected: bool) -> None:
    check(expression, expected)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('true && "yes"', "yes"),
        ('0 && "yes"', 0),
        ('"" && "yes"', ""),
        ('"" || "fallback"', "fallback"),
        ('"first" || "second"', "first"),
        ("null || 0", 0),
        ("missing || x", 5),
        ("x && a.b", "x"),
        ("!0", True),
        ('!""', True),
        ("!(0 / 0)", True),
        ("![]", False),
        ("!{}", False),
        ('!!"x"', True),
        ("!null", True),
        ("!x", False),
        ('x > 1 ? "big" : "small"', "big"),
        ("false ? 1 : true ? 2 : 3", 2),
        ("null ? 1 : 2", 2),
        ("[] ? 1 : 2", 1),
        ('a.b == "x" ? a.list[0] : 0', 10),
    ],
)
def test_logic_returns_the_deciding_operand(expression: str, expected: Any) -> None:
    check(expression, expected)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3 == 7", True),
        ("!x == false", True),  # `!` binds tighter than `==`
        ("!a.b", False),  # ...and looser than member access
        ("true || false && false", False),  # JEXL: `&&` and `||` share a level, left to right
        ("false && true || true", True),
        ("1 < 2 == true", True),
        ('"a" in "abc" == true', True),
        ("2 * 3 % 4", 6),  # JEXL ranks `%` above `*`
        ("1 + 1 < 3 && 2 > 1", True),
        ("x > 1 && x < 10 ? 1 + 1 : 0", 2),
        ("true ? false : true ? 1 : 2", False),
        ("(true || false) && false", False),
    ],
)
def test_precedence(expression: str, expected: Any) -> None:
    check(expression, expected)


class RecordingScope(dict[str, Any]):
    """A scope that records which names the evaluation read."""

    def __init__(self, **values: Any) -> None:
        super().__init__(values)
        self.read: list[str] = []

    def get(self, key: str, default: Any = None) -> Any:
        self.read.append(key)
        return super().get(key, default)


@pytest.mark.parametrize(
    ("expression", "read"),
    [
        ("f && boom", ["f"]),
        ("t || boom", ["t"]),
        ("t && ok", ["t", "ok"]),
        ("f ? boom : ok", ["f", "ok"]),
        ("t ? ok : boom", ["t", "ok"]),
        ("f && boom.deep || ok", ["f", "ok"]),
    ],
)
def test_short_circuit_skips_the_other_operand(expression: str, read: list[str]) -> None:
    scope = RecordingScope(t=True, f=False, ok=1)
    compile_condition(expression).evaluate(scope)
    assert scope.read == read


# -- the manifests' own conditions -----------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "expected"),
    [({"briefDraft": "text"}, True), ({"briefDraft": ""}, True), ({"briefDraft": None}, False),
     ({}, False)],
)
def test_brief_draft_present(scope: dict[str, Any], expected: bool) -> None:
    assert evaluate_condition("briefDraft != null", scope) is expected


@pytest.mark.parametrize(
    ("confidence", "priority", "expected"),
    [(0.5, "low", True), (0.9, "high", True), (0.9, "low", False), (None, "low", True),
     (0.7, "HIGH", False)],
)
def test_low_confidence_or_high_priority(confidence: Any, priority: str, expected: bool) -> None:
    scope = {"classification": {"confidence": confidence}, "priority": priority}
    expression = 'classification.confidence < 0.7 || priority == "high"'
    assert evaluate_condition(expression, scope) is expected


def test_member_equals_string_and_not_null() -> None:
    assert evaluate_condition('a.b == "x"', {"a": {"b": "x"}}) is True
    assert evaluate_condition('a.b == "x"', {"a": {"b": "y"}}) is False
    assert evaluate_condition('a.b == "x"', {}) is False
    assert evaluate_condition("x != null", {"x": 0}) is True
    assert evaluate_condition("x != null", {}) is False


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, False), (False, False), (0, False), (0.0, False), (-0.0, False), (NAN, False),
     ("", False), (True, True), (1, True), (-1, True), (0.1, True), ("0", True),
     ("false", True), (" ", True), ([], True), ({}, True), ([0], True)],
)
def test_truthy(value: Any, expected: bool) -> None:
    assert truthy(value) is expected


def test_evaluate_condition_returns_a_bool() -> None:
    assert evaluate_condition("x", {"x": "yes"}) is True
    assert evaluate_condition("x", {"x": []}) is True
    assert evaluate_condition("x", {}) is False


# -- compilation -----------------------------------------------------------------------


def test_compiled_conditions_are_cached_and_reusable() -> None:
    condition = compile_condition("n > 1")
    assert compile_condition("n > 1") is condition
    assert isinstance(condition, Condition)
    assert condition.expression == "n > 1"
    assert repr(condition) == "Condition('n > 1')"
    assert [condition.evaluate({"n": n}) for n in (0, 1, 2)] == [False, False, True]


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ('a.b == "x" && c[d] || {{ E.f }} > a', ["a", "c", "d", "E"]),
        ("a.b.c", ["a"]),
        ("x in y", ["x", "y"]),
        ("true && null || 1", []),
        ('{k: v, "s": w}', ["v", "w"]),
        ("[p, q, p]", ["p", "q"]),
        ("t ? u : v", ["t", "u", "v"]),
        ("!m - n", ["m", "n"]),
    ],
)
def test_condition_identifiers(expression: str, names: list[str]) -> None:
    assert condition_identifiers(expression) == names


@pytest.mark.parametrize(
    ("expression", "position", "reason"),
    [
        ("a ==", 4, "expected a value at end of expression"),
        ("a == == b", 5, "unexpected token '==' at position 5"),
        ("1 +* 2", 3, "unexpected token '*' at position 3"),
        ("(a", 2, "expected ')' at end of expression"),
        ("(a b)", 3, "expected ')' but found 'b' at position 3"),
        ("'abc", 0, "unterminated string starting at position 0"),
        ("a == 'abc", 5, "unterminated string starting at position 5"),
        ('"abc\\', 0, "unterminated string starting at position 0"),
        ("a | upper", 2, "transforms are not supported ('|' at position 2)"),
        ("x|upper", 1, "transforms are not supported ('|' at position 1)"),
        ("f(x)", 1, "function calls are not supported ('(' at position 1)"),
        ("a.b(c)", 3, "function calls are not supported ('(' at position 3)"),
        ("a b", 2, "unexpected token 'b' at position 2"),
        ("a = 1", 2, "unexpected character '=' at position 2"),
        ("1 === 1", 4, "unexpected character '=' at position 4"),
        ("a & b", 2, "unexpected character '&' at position 2"),
        ("a # b", 2, "unexpected character '#' at position 2"),
        ("[1, 2", 5, "expected ',' or ']' at end of expression"),
        ("[1 2]", 3, "expected ',' or ']' but found '2' at position 3"),
        ("a[1", 3, "expected ']' at end of expression"),
        ("{a 1}", 3, "expected ':' but found '1' at position 3"),
        ("{1: 2}", 1, "expected an object key but found '1' at position 1"),
        ("{a: 1", 5, "expected ',' or '}' at end of expression"),
        ("a.5", 2, "expected a property name after '.' but found '5' at position 2"),
        ("a.", 2, "expected a property name after '.' at end of expression"),
        ("a ? b", 5, "expected ':' at end of expression"),
        ("{{ not a path }} == 1", 0, "invalid template at position 0: expected '{{ path }}'"),
        ("in", 0, "unexpected token 'in' at position 0"),
        ("x in", 4, "expected a value at end of expression"),
        (")", 0, "unexpected token ')' at position 0"),
        ("!", 1, "expected a value at end of expression"),
    ],
)
def test_syntax_errors_name_the_position(expression: str, position: int, reason: str) -> None:
    with pytest.raises(ConditionSyntaxError) as raised:
        compile_condition(expression)
    error = raised.value
    assert (error.reason, error.position, error.expression) == (reason, position, expression)
    assert isinstance(error, InvalidInput)
    assert str(error) == reason


NESTINGS = {
    "parentheses": lambda n: "(" * n + "1" + ")" * n,
    "negations": lambda n: "!" * n + "x",
    "minus signs": lambda n: "- " * n + "1",
    "arrays": lambda n: "[" * n + "1" + "]" * n,
    "objects": lambda n: "{k: " * n + "1" + "}" * n,
    "additions": lambda n: "1" + " + 1" * n,
    "members": lambda n: "a" + ".b" * n,
    "indexes": lambda n: "a" + "[0]" * n,
    "ternaries": lambda n: "t ? 1 : " * n + "0",
    "mixed": lambda n: "[{k: " * (n // 2) + "1" + "}]" * (n // 2),
}


@pytest.mark.parametrize("build", NESTINGS.values(), ids=NESTINGS.keys())
def test_nesting_up_to_the_limit_compiles_and_evaluates(build: Any) -> None:
    compile_condition(build(MAX_DEPTH)).evaluate({})


@pytest.mark.parametrize("build", NESTINGS.values(), ids=NESTINGS.keys())
# +2: "mixed" nests in pairs; 2,000 stays under the expression length limit
@pytest.mark.parametrize("depth", [MAX_DEPTH + 2, 2_000])
def test_absurd_nesting_is_a_syntax_error(build: Any, depth: int) -> None:
    with pytest.raises(ConditionSyntaxError, match="nested too deeply"):
        compile_condition(build(depth))


# -- properties ------------------------------------------------------------------------

booleans = st.recursive(
    st.booleans().map(lambda b: ("true" if b else "false", b)),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda p: (f"({p[0][0]} && {p[1][0]})", p[0][1] and p[1][1])),
        st.tuples(inner, inner).map(lambda p: (f"({p[0][0]} || {p[1][0]})", p[0][1] or p[1][1])),
        inner.map(lambda p: (f"!{p[0]}", not p[1])),
    ),
    max_leaves=30,
)


@given(booleans)
def test_nested_boolean_logic_matches_python(case: tuple[str, bool]) -> None:
    expression, expected = case
    assert value_of(expression, {}) is expected


@given(st.lists(st.tuples(st.sampled_from(["&&", "||"]), st.booleans(), st.booleans()),
                min_size=1, max_size=8), st.booleans())
def test_unbracketed_and_or_share_a_level_left_to_right(
        chain: list[tuple[str, bool, bool]], first: bool) -> None:
    # JEXL gives `&&` and `||` one precedence level: `a || b && c` is `(a || b) && c`.
    def text(negated: bool, value: bool) -> str:
        return ("!" if negated else "") + ("true" if value else "false")

    expression = "true" if first else "false"
    expected = first
    for op, negated, value in chain:
        expression += f" {op} {text(negated, value)}"
        operand = value != negated
        expected = (expected and operand) if op == "&&" else (expected or operand)
    assert evaluate_condition(expression, {}) is expected


small_ints = st.integers(min_value=-10**6, max_value=10**6)


@given(small_ints, small_ints)
def test_integer_arithmetic_and_comparison_match_python(x: int, y: int) -> None:
    scope = {"x": x, "y": y}
    assert value_of("x + y", scope) == x + y
    assert value_of("x - y", scope) == x - y
    assert value_of("x * y", scope) == x * y
    assert value_of("x < y", scope) is (x < y)
    assert value_of("x >= y", scope) is (x >= y)
    assert value_of("x == y", scope) is (x == y)
    if y:
        assert value_of("x // y", scope) == x // y
        assert value_of("x % y", scope) == math.fmod(x, y)


json_scalars = st.one_of(st.none(), st.booleans(), small_ints, st.floats(), st.text(max_size=5))


@given(json_scalars, json_scalars)
def test_or_and_and_return_an_operand(left: Any, right: Any) -> None:
    scope = {"l": left, "r": right}
    assert same(value_of("l || r", scope), left if truthy(left) else right)
    assert same(value_of("l && r", scope), right if truthy(left) else left)


@given(st.text(alphabet="ab01 .()[]{}!|&=<>+-*/%?:,'\"\\\nin", max_size=25))
def test_any_text_either_compiles_or_is_a_syntax_error(expression: str) -> None:
    try:
        condition = compile_condition(expression)
    except ConditionSyntaxError as error:
        assert 0 <= error.position <= len(expression)
        return
    condition.evaluate({"a": {"b": [1, "x"]}, "b": 0})
