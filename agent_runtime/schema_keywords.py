"""The keywords a compiled JSON Schema validates with (see `agent_runtime.schemas`).

Each of a dialect's keywords is counted against the running validation's
step budget (`step_budget`; a reference counts as ten, since following one
costs about that much), and the keywords that apply regular expressions —
`pattern`, `patternProperties`, and the `additionalProperties` and
`unevaluatedProperties` that depend on them — are jsonschema's own
re-implemented on RE2, whose matching time is linear in the text. ECMA-262's
`\\uXXXX` escapes are rewritten to RE2's `\\x{XXXX}`; `regex_problem` says why
RE2 cannot run a pattern, for the checks that refuse it first.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import jsonschema
import re2  # type: ignore[import-untyped]  # google-re2 ships no type information
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from agent_runtime.excerpts import excerpt

__all__ = ["REFERENCE_KEYWORDS", "TooCostly", "UnusablePattern", "on_re2", "regex_format",
           "regex_problem", "step_budget"]

# -- regular expressions ------------------------------------------------------------

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # RE2 would print every refused pattern on stderr
_RE2_OPTIONS.never_capture = True  # only whether it matches matters
_RE2_OPTIONS.max_mem = 8 << 20  # a pattern whose program needs more is refused
_HEX = frozenset("0123456789abcdefABCDEF")


def _as_re2(pattern: str) -> str:
    """ECMA-262 escapes RE2 spells differently: `\\uXXXX` and `\\u{X...}` -> `\\x{...}`."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            if pattern[i + 1] == "u":
                digits = pattern[i + 2:i + 6]
                if len(digits) == 4 and set(digits) <= _HEX:
                    out.append(f"\\x{{{digits}}}")
                    i += 6
                    continue
                end = pattern.find("}", i + 3)
                braced = pattern[i + 3:end]
                if (pattern[i + 2:i + 3] == "{" and end > 0 and 0 < len(braced) <= 6
                        and set(braced) <= _HEX):
                    out.append(f"\\x{{{braced}}}")
                    i = end + 1
                    continue
            out.append(pattern[i:i + 2])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> Any:
    """`pattern` compiled by RE2; `re2.error` or `UnicodeError` when it cannot be."""
    return re2.compile(_as_re2(pattern), _RE2_OPTIONS)


def regex_problem(pattern: str) -> str | None:
    """Why RE2 cannot run `pattern`, or None."""
    try:
        _regex(pattern)
    except re2.error as error:
        detail = error.args[0] if error.args else ""
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        return (f"pattern {excerpt(pattern)} is not supported: {detail} (patterns run on RE2: "
                "no backreferences or look-around, repetition counts up to 1000)")
    except UnicodeError:
        return f"pattern {excerpt(pattern)} is not valid Unicode text"
    return None


def _matches(pattern: str, text: str) -> bool:
    """Whether RE2 finds `pattern` in `text`; text that is not valid Unicode (a lone
    surrogate) matches nothing."""
    try:
        return _regex(pattern).search(text) is not None
    except UnicodeError:
        return False
    except re2.error as error:  # compile_schema checked every pattern: only a bug lands here
        raise UnusablePattern(regex_problem(pattern) or str(error)) from error


def regex_format(instance: object) -> bool:
    """The `regex` format, as RE2 reads it."""
    return not isinstance(instance, str) or regex_problem(instance) is None


class UnusablePattern(Exception):
    """A pattern RE2 could not compile reached a validation."""


# -- the step budget ------------------------------------------------------------------


class TooCostly(Exception):
    """A validation ran past its step budget."""


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise TooCostly()


# The budget of the validation running in this context; None outside one.
_BUDGET: ContextVar[_Budget | None] = ContextVar("schema_budget", default=None)


@contextlib.contextmanager
def step_budget(steps: int) -> Iterator[None]:
    """Let the validation run inside allow at most `steps` keyword evaluations."""
    token = _BUDGET.set(_Budget(steps))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _spend(steps: int = 1) -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.spend(steps)


Keyword = Callable[[Any, Any, Any, Mapping[str, Any]], Iterator[ValidationError] | None]


# Following a reference (a lookup, a new resolver) costs about ten plain keywords.
_REFERENCE_STEPS = 10
REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


# -- keywords -----------------------------------------------------------------------


def _counted(keyword: Keyword, steps: int) -> Keyword:
    def counted(validator: Any, value: Any, instance: Any,
                schema: Mapping[str, Any]) -> Iterator[ValidationError] | None:
        _spend(steps)
        return keyword(validator, value, instance, schema)
    return counted


def _pattern(validator: Any, pattern: Any, instance: Any,
             schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any,
                        schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    return [key for key in instance if key not in properties
            and not any(_matches(pattern, key) for pattern in patterns)]


def _additional_properties(validator: Any, additional: Any, instance: Any,
                           schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    # jsonschema's own, with RE2 in place of `re`.
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        joined = ", ".join(repr(each) for each in sorted(extras, key=str))
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({joined} {verb} "
                                  "unexpected)")


def _valid(errors: Iterator[ValidationError]) -> bool:
    return next(errors, None) is None


def _evaluated_keys(validator: Any, instance: Mapping[str, Any], schema: Any) -> set[str]:
    """The keys of `instance` that `schema` evaluates in place (2020-12's
    unevaluatedProperties): jsonschema's own walk, with RE2 in place of `re`."""
    _spend()
    if validator.is_type(schema, "boolean"):
        return set()
    keys: set[str] = set()
    for keyword in ("$ref", "$dynamicRef"):
        reference = schema.get(keyword)
        if reference is not None:
            _spend(_REFERENCE_STEPS)
            # `_resolver` is how jsonschema's own keywords follow a reference.
            resolved = validator._resolver.lookup(reference)
            keys |= _evaluated_keys(validator.evolve(schema=resolved.contents,
                                                     _resolver=resolved.resolver),
                                    instance, resolved.contents)
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            keys |= {key for key, value in instance.items()
                     if _valid(validator.descend(value, subschema))}
    for pattern in schema.get("patternProperties", {}):
        keys |= {key for key in instance if _matches(pattern, key)}
    for key, subschema in schema.get("dependentSchemas", {}).items():
        if key in instance:
            keys |= _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _valid(validator.descend(instance, subschema)):
                keys |= _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys |= _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys |= _evaluated_keys(validator, instance, schema["else"])
    return keys


def _unevaluated_properties(validator: Any, unevaluated: Any, instance: Any,
                            schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_keys(validator, instance, schema)
    invalid = [key for key in instance if key not in evaluated
               and not _valid(validator.descend(instance[key], unevaluated, path=key,
                                                schema_path=key))]
    if invalid:
        joined = ", ".join(repr(each) for each in sorted(invalid, key=str))
        verb = "was" if len(invalid) == 1 else "were"
        if unevaluated is False:
            yield ValidationError(f"Unevaluated properties are not allowed ({joined} {verb} "
                                  "unexpected)")
        else:
            yield ValidationError("Unevaluated properties are not valid under the given schema "
                                  f"({joined} {verb} unevaluated and invalid)")


_RE2_KEYWORDS: dict[str, Keyword] = {
    "pattern": _pattern, "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "unevaluatedProperties": _unevaluated_properties,
}


def on_re2(base: type[Validator]) -> type[Validator]:
    """`base`'s dialect with every keyword counted against the budget, and the
    regex keywords on RE2."""
    keywords = dict(base.VALIDATORS)
    keywords.update({name: keyword for name, keyword in _RE2_KEYWORDS.items()
                     if name in keywords})
    extended: type[Validator] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        base, {name: _counted(keyword, _REFERENCE_STEPS if name in REFERENCE_KEYWORDS else 1)
               for name, keyword in keywords.items()})
    return extended
