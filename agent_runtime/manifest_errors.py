"""A pydantic `ValidationError` as one `ManifestError`, located as the user wrote it.

Tagged unions and pydantic's own location parts (`[key]`, a content part's
tag) are taken out of the path, every error type gets a reason a person can
act on, and all the problems are reported at once, the first one leading.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from agent_runtime.document_paths import PathPart, format_path, quote
from agent_runtime.errors import ManifestError
from agent_runtime.manifest_input import describe

# Tagged unions add their tag to an error's location: ("content", 1, "text",
# "text"). A content-part tag follows an index into a `content` list; a
# model-reference tag follows a `model` key. Steps are validated by their
# kind's model (`agent_runtime.step_kinds`), which adds no tag.
_TAGGED_LISTS = {"content": "content part"}
_LIST_NOUNS = {**_TAGGED_LISTS, "steps": "step"}
_MODEL_TAGS = frozenset({"explicit", "profile"})

_TYPE_NAMES = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean (true or false)",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
}


def _user_loc(loc: tuple[PathPart, ...]) -> list[PathPart]:
    out: list[PathPart] = []
    for i, part in enumerate(loc):
        after_index = i >= 2 and isinstance(loc[i - 1], int) and loc[i - 2] in _TAGGED_LISTS
        after_model = i >= 1 and loc[i - 1] == "model" and part in _MODEL_TAGS
        if after_index or after_model or part == "[key]":
            continue
        out.append(part)
    return out


def _reason(error: ErrorDetails, path: list[PathPart]) -> tuple[str, list[PathPart]]:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error["input"]
    if kind == "manifest_rule":
        return str(ctx["reason"]), path + list(ctx.get("at", ()))
    if kind == "extra_forbidden":
        return "unknown field", path
    if kind == "missing":
        return "required field is missing", path
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        noun = _LIST_NOUNS.get(str(path[-2]), "") + " " if len(path) >= 2 else ""
        allowed = f"allowed {noun}types: {ctx.get('expected_tags', '')}"
        if kind == "union_tag_not_found":  # pydantic gives no choices here
            return "required field is missing", [*path, "type"]
        return f"unknown {noun}type {_shown(ctx.get('tag'))}; {allowed}", [*path, "type"]
    if kind == "literal_error" and path and path[-1] == "schemaVersion":
        if value == 1.0 and not isinstance(value, str):
            return ('must be the string "1.0"; YAML read 1.0 as a number, '
                    "quote it: schemaVersion: '1.0'"), path
        return f'unsupported schema version {_shown(value)}; this runtime reads "1.0"', path
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {describe(value)}", path
    if kind in _TYPE_NAMES:
        return f"expected {_TYPE_NAMES[kind]}, got {describe(value)}", path
    if kind in ("greater_than", "greater_than_equal", "less_than_equal"):
        bound = {"greater_than": "greater than", "greater_than_equal": "at least",
                 "less_than_equal": "at most"}[kind]
        limit = ctx.get("gt", ctx.get("ge", ctx.get("le")))
        return f"must be {bound} {limit}, got {_shown(value)}", path
    if kind in ("string_too_short", "too_short"):
        return "must not be empty", path
    if kind == "model_ref":
        return error["msg"], path
    if kind == "value_error":
        return str(ctx.get("error", error["msg"])), path
    msg = error["msg"]
    return msg[:1].lower() + msg[1:], path


def _shown(value: Any) -> str:
    """A value quoted in a reason: a short string as repr, else as `describe` names it."""
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return describe(value).removeprefix("a number (").removesuffix(")")
    return describe(value)


# Enough to fix a manifest in one pass; past it the count says how many remain.
MAX_REPORTED_PROBLEMS = 20


def manifest_error_from_validation(exc: ValidationError, *, source: str,
                                   more: Iterable[tuple[str, str]] = ()) -> ManifestError:
    """Every validation problem, located the way the user wrote the manifest.

    `field` and the start of the reason are the first problem's; the others
    follow it, so one run of `validate` shows them all. `more` adds problems
    (path, reason) found outside pydantic, such as rules of a model whose
    fields already failed.
    """
    problems = []
    for error in exc.errors(include_url=False):
        reason, path = _reason(error, _user_loc(tuple(error["loc"])))
        problems.append((format_path(path), reason))
    problems.extend(problem for problem in more if problem not in problems)
    field, reason = problems[0]
    others = [f"{p}: {r}" if p else r for p, r in problems[1:MAX_REPORTED_PROBLEMS]]
    if len(problems) > MAX_REPORTED_PROBLEMS:
        others.append(f"{len(problems) - MAX_REPORTED_PROBLEMS} more")
    if others:
        reason += f" (also: {'; '.join(others)})"
    return ManifestError(reason, source=source, field=field or None)
