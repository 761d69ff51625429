"""Reading manifest files and reporting what is wrong with them.

Every problem a user can make in a manifest ends up as one `ManifestError`
naming the file, the field as the user wrote it and the reason:

    release.agent.yaml: steps[1].outputVariable: 'brief.draft' contains a dot; ...

This module owns that translation: the strict base model every schema model
derives from, `rule_error` for cross-field rules, the structure guard run
before pydantic, YAML/JSON reading, and `ValidationError` -> `ManifestError`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from datetime import date, datetime, time
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails, PydanticCustomError

from agent_runtime.errors import ManifestError

JsonObject = dict[str, Any]
NonEmptyStr = Annotated[str, Field(min_length=1)]

MAX_DEPTH = 128
MAX_NODES = 100_000

PathPart = str | int


class SchemaModel(BaseModel):
    """Strict, camelCase-aliased and immutable: the base of every manifest model.

    Strict because the reference schema is (no "5" -> 5 coercion); immutable
    because a manifest's hash must not drift after it was computed.
    """

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
        strict=True,
        frozen=True,
    )


def rule_error(reason: str, *at: PathPart) -> PydanticCustomError:
    """A schema rule broken at sub-path `at` (aliases) of the model being validated.

    The reason travels as a context value rather than as the template, so
    braces in user text (a step id like `{x}`) are never interpreted.
    """
    return PydanticCustomError("manifest_rule", "{reason}", {"reason": reason, "at": at})


_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$-]*")


def format_path(parts: Iterable[PathPart]) -> str:
    """`("steps", 0, "loop", "maxIterations")` -> `steps[0].loop.maxIterations`."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


def describe(value: Any) -> str:
    """A value as a YAML/JSON user would name it: `a string ('5')`, `a list`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"a string ({shown!r})"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


# -- reading files -----------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.safe_load`'s loader, refusing a key written twice in one mapping.

    Plain safe_load keeps the last of two equal keys without a word, so a
    manifest could silently lose a field; the reference implementation rejects it.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"found duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_document(text: str, *, source: str, json_format: bool = False) -> Any:
    """YAML (safe loading, duplicate keys refused) or, with `json_format`, JSON text -> data."""
    try:
        if json_format:
            return json.loads(text, object_pairs_hook=_unique_pairs)
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except json.JSONDecodeError as exc:
        raise ManifestError(f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                            source=source) from None
    except ValueError as exc:  # a duplicate key in JSON
        raise ManifestError(f"malformed JSON: {exc}", source=source) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or "syntax error"
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ManifestError(f"malformed YAML{where}: {problem}", source=source) from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"malformed YAML: {exc}", source=source) from None
    except RecursionError:
        raise ManifestError(f"nested too deeply to parse (the limit is {MAX_DEPTH} levels)",
                            source=source) from None


def read_document(path: Path) -> dict[str, Any]:
    """A manifest file's top-level mapping; `.json` files are JSON, the rest YAML."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError("file not found", source=source) from None
    except UnicodeDecodeError as exc:
        raise ManifestError(f"not UTF-8 text ({exc.reason} at byte {exc.start})",
                            source=source) from None
    except OSError as exc:
        raise ManifestError(f"cannot read the file: {exc.strerror or exc}", source=source) from None
    data = parse_document(text, source=source, json_format=path.suffix.lower() == ".json")
    if not isinstance(data, dict):
        got = "an empty document" if data is None else describe(data)
        raise ManifestError(f"expected a mapping at the top level, got {got}", source=source)
    return data


# -- the structure guard -----------------------------------------------------


def _not_json(value: Any) -> str | None:
    """Why a loaded scalar is not a JSON value, or None when it is one."""
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value!r} is not a JSON number"
    if isinstance(value, date | datetime | time):
        # YAML reads an unquoted 2024-01-01 as a date; the manifest must stay JSON.
        return f"YAML read {value.isoformat()} as a date or time; quote it to keep it as text"
    return f"{describe(value)} is not a JSON value"


def check_structure(data: Any, *, source: str) -> None:
    """Reject data no manifest can be before pydantic walks it.

    Bounds depth and node count (YAML aliases can expand a small file into a
    huge tree), rejects cycles (a YAML alias to an enclosing node), non-string
    mapping keys and values JSON cannot represent (the manifest is stored and
    hashed as JSON). Iterative, so hostile input cannot exhaust the stack.
    """
    nodes = 0
    on_path: set[int] = set()  # ids of the containers enclosing the current node
    stack: list[tuple[Any, tuple[PathPart, ...], bool]] = [(data, (), False)]
    while stack:
        value, path, leaving = stack.pop()
        if leaving:
            on_path.discard(id(value))
            continue
        nodes += 1
        if nodes > MAX_NODES:
            raise ManifestError(f"too large: more than {MAX_NODES:,} values", source=source)
        if len(path) > MAX_DEPTH:
            raise ManifestError(f"nested deeper than {MAX_DEPTH} levels",
                                source=source, field=format_path(path[:4]) + "...")
        if isinstance(value, dict):
            children: list[tuple[PathPart, Any]] = []
            for key, child in value.items():
                if not isinstance(key, str):
                    raise ManifestError(
                        f"mapping keys must be strings, got {describe(key)}; quote it",
                        source=source, field=format_path(path) or None)
                children.append((key, child))
        elif isinstance(value, list):
            children = list(enumerate(value))
        else:
            problem = _not_json(value)
            if problem:
                raise ManifestError(problem, source=source, field=format_path(path) or None)
            continue
        if id(value) in on_path:
            raise ManifestError("contains itself (a YAML alias to an enclosing node)",
                                source=source, field=format_path(path) or None)
        on_path.add(id(value))
        stack.append((value, path, True))
        stack.extend((child, (*path, key), False) for key, child in reversed(children))


# -- pydantic errors -> ManifestError ------------------------------------------

# Tagged unions add their tag to an error's location: ("steps", 1, "prompt",
# "outputVariable"). A step or content-part tag follows an index into a
# `steps`/`content` list; a model-reference tag follows a `model` key.
_TAGGED_LISTS = {"steps": "step", "content": "content part"}
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
        noun = _TAGGED_LISTS.get(str(path[-2]), "") + " " if len(path) >= 2 else ""
        allowed = f"allowed {noun}types: {ctx.get('expected_tags', '')}"
        if kind == "union_tag_not_found":  # pydantic gives no choices here
            return "required field is missing", [*path, "type"]
        return f"unknown {noun}type {ctx.get('tag')!r}; {allowed}", [*path, "type"]
    if kind == "literal_error" and path and path[-1] == "schemaVersion":
        if value == 1.0 and not isinstance(value, str):
            return ('must be the string "1.0"; YAML read 1.0 as a number, '
                    "quote it: schemaVersion: '1.0'"), path
        return f'unsupported schema version {value!r}; this runtime reads "1.0"', path
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {describe(value)}", path
    if kind in _TYPE_NAMES:
        return f"expected {_TYPE_NAMES[kind]}, got {describe(value)}", path
    if kind in ("greater_than", "greater_than_equal", "less_than_equal"):
        bound = {"greater_than": "greater than", "greater_than_equal": "at least",
                 "less_than_equal": "at most"}[kind]
        limit = ctx.get("gt", ctx.get("ge", ctx.get("le")))
        return f"must be {bound} {limit}, got {value!r}", path
    if kind in ("string_too_short", "too_short"):
        return "must not be empty", path
    if kind == "model_ref":
        return error["msg"], path
    if kind == "value_error":
        return str(ctx.get("error", error["msg"])), path
    msg = error["msg"]
    return msg[:1].lower() + msg[1:], path


def manifest_error_from_validation(exc: ValidationError, *, source: str) -> ManifestError:
    """The first validation problem, located the way the user wrote the manifest.

    `field` and the start of the reason are the first problem's; up to two
    more are summarised after it so one run of `validate` shows a few at once.
    """
    problems = []
    for error in exc.errors(include_url=False):
        reason, path = _reason(error, _user_loc(tuple(error["loc"])))
        problems.append((format_path(path), reason))
    field, reason = problems[0]
    others = [f"{p}: {r}" if p else r for p, r in problems[1:3]]
    if len(problems) > 3:
        others.append(f"{len(problems) - 3} more")
    if others:
        reason += f" (also: {'; '.join(others)})"
    return ManifestError(reason, source=source, field=field or None)
