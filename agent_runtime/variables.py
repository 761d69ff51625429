"""Variables: their names, their types and a run's override rules.

Names: a variable key (also a step's `outputVariable` and a sub-run mapping
key) is a top-level name: trimmed, 1..100 characters, no dots (dots only read
properties inside a value) and not a prototype-sensitive name. A loop's
`itemVariable`/`indexVariable`/`resultVariable` may be a dotted path, with no
empty or prototype-sensitive segment.

Overrides (schema 1.0, as the reference implementation):

- start from the declared defaults; a declaration with neither a value nor an
  override is simply absent;
- an override replaces the whole value: objects are not deep-merged;
- override keys must be exact declared keys; duplicates (ignoring case), type
  mismatches and a missing `requiresOverride` key are rejected, even when
  that key has a default, before the run is created.

Override errors are `VariableError`s naming the source (a run manifest path or
"--variables"), the field (`variables.audience`, `variables[0].key`) and why.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator

from agent_runtime.document_paths import format_path, quote
from agent_runtime.errors import ManifestError, VariableError, VariablesNotFound
from agent_runtime.limits import current_limits, decode_utf8, read_bounded
from agent_runtime.manifest_input import (
    check_structure,
    describe,
    parse_document,
    rule_error,
)

if TYPE_CHECKING:  # the manifest models are built from the rules below
    from agent_runtime.manifest import AgentManifest
    from agent_runtime.run_manifest import VariableOverride

VariableType = Literal["string", "number", "boolean", "object", "array", "json"]

# Names that would reach an object prototype in the reference implementation;
# rejected here too so a manifest means the same thing in both runtimes.
_PROTOTYPE_NAMES = frozenset({"__proto__", "prototype", "constructor"})
_MAX_KEY_LENGTH = 100


def _variable_key(value: str) -> str:
    key = value.strip()
    if not key:
        raise rule_error("must not be empty")
    if len(key) > _MAX_KEY_LENGTH:
        raise rule_error(f"must be at most {_MAX_KEY_LENGTH} characters")
    if "." in key:
        raise rule_error(
            f"{quote(key)} contains a dot; variable keys are top-level names "
            "(dots only read properties inside a value)"
        )
    if key.lower() in _PROTOTYPE_NAMES:
        raise rule_error(f"{quote(key)} is a reserved name")
    return key


def _variable_path(value: str) -> str:
    segments = [segment.strip() for segment in value.split(".")]
    if any(not segment for segment in segments):
        raise rule_error(f"{quote(value)} has an empty path segment")
    if any(segment.lower() in _PROTOTYPE_NAMES for segment in segments):
        raise rule_error(f"{quote(value)} uses a reserved name")
    return value


def value_matches_type(value: Any, type_: str) -> bool:
    """Whether a variable value fits its declared type (JSON semantics: a bool is no number)."""
    if type_ == "string":
        return isinstance(value, str)
    if type_ == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if type_ == "boolean":
        return isinstance(value, bool)
    if type_ == "object":
        return isinstance(value, dict)
    if type_ == "array":
        return isinstance(value, list)
    return isinstance(value, dict | list)  # "json": an object or an array


def check_declared_types(manifest: AgentManifest, values: Mapping[str, Any]) -> None:
    """Refuse `values` (a fork's edited variables) where one the manifest declares is
    not of its declared type, naming it (`variables.KEY`); the other variables are
    the run's own (step outputs, loop items) and any JSON value."""
    for item in manifest.variables:
        if item.key in values and not value_matches_type(values[item.key], item.type):
            raise VariableError(f"variable {quote(item.key)} is declared {item.type}: the "
                                "value given is not", source="the fork's variables",
                                field=f"variables.{item.key}")


VariableKey = Annotated[str, AfterValidator(_variable_key)]
VariablePath = Annotated[str, AfterValidator(_variable_path)]
Overrides = Mapping[str, Any] | Sequence["VariableOverride"]


def _entries(overrides: Overrides | None) -> list[tuple[str, str, Any]]:
    """(field path of the key, key, value) for each override, in the order given."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [(format_path(("variables", str(key))), key, value)
                for key, value in overrides.items()]
    return [(f"variables[{index}].key", o.key, o.value) for index, o in enumerate(overrides)]


def _value_field(key_field: str) -> str:
    # `variables.audience` names the value itself; `variables[0].key` has a sibling `.value`.
    return key_field.removesuffix(".key") + ".value" if key_field.endswith(".key") else key_field


def resolve_variables(manifest: AgentManifest, overrides: Overrides | None, *,
                      source: str) -> dict[str, Any]:
    """The run's initial variables, in declaration order; raises `VariableError`.

    `overrides` is a mapping (`--variables '{"audience": "partners"}'`) or the
    run manifest's `variables` list. The result shares no objects with the
    manifest, so a run mutating its state can never change the manifest's hash.
    """
    declared = {declaration.key: declaration for declaration in manifest.variables}
    by_folded_key = {key.casefold(): key for key in declared}
    given: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for field, key, value in _entries(overrides):
        if not isinstance(key, str):
            raise VariableError(f"variable keys must be strings, got {describe(key)}",
                                source=source, field="variables")
        if key.casefold() in seen:
            raise VariableError(
                f"duplicate override of {quote(key)}: {quote(seen[key.casefold()])} was "
                "already given (keys are compared ignoring case)", source=source, field=field)
        seen[key.casefold()] = key
        if key not in declared:
            close = by_folded_key.get(key.casefold())
            shown = ", ".join(declared) if len(declared) <= 20 else \
                ", ".join(list(declared)[:20]) + f" and {len(declared) - 20} more"
            hint = (f"; did you mean {quote(close)}? keys must match exactly" if close else
                    f"; declared: {shown or 'none'}")
            raise VariableError(f"unknown variable {quote(key)}{hint}", source=source,
                                field=field)
        declaration = declared[key]
        if not value_matches_type(value, declaration.type):
            raise VariableError(
                f"{quote(key)} is declared as {declaration.type}, got {describe(value)}",
                source=source, field=_value_field(field))
        try:
            check_structure(value, source=source)
        except ManifestError as exc:
            raise VariableError(exc.reason, source=source,
                                field=_value_field(field) + _inner(exc.field)) from None
        given[key] = value

    resolved: dict[str, Any] = {}
    for key, declaration in declared.items():
        if key in given:
            resolved[key] = copy.deepcopy(given[key])
        elif declaration.requires_override:
            raise VariableError(
                f"the agent requires a value for {quote(key)} (requiresOverride: true)"
                + ("; its default does not count" if declaration.has_default else ""),
                source=source, field=format_path(("variables", key)))
        elif declaration.has_default:
            resolved[key] = copy.deepcopy(declaration.value)
    return resolved


def parse_variables_json(text: str, *, source: str = "--variables",
                         yaml_format: bool = False) -> dict[str, Any]:
    """A `--variables` JSON object (`{"audience": "partners"}`) as an overrides mapping.

    Held to the variables size limit and the structure guard (depth, string
    and integer size, lone surrogates); a key given twice is refused, not
    last-wins. `yaml_format` reads YAML instead (an @file that is not `.json`).
    """
    data = parse_document(text, source=source, json_format=not yaml_format,
                          limit=current_limits().variables_bytes, error=VariableError)
    kind = "a YAML mapping" if yaml_format else "a JSON object"
    if isinstance(data, list):
        data = _from_pairs(data, source=source, kind=kind)
    if not isinstance(data, dict):
        raise VariableError(f"expected {kind} of variable values (or a list of "
                            f"{{key, value}}), got {describe(data)}", source=source)
    try:
        check_structure(data, source=source)
    except ManifestError as exc:
        raise VariableError(exc.reason, source=source,
                            field=format_path(("variables",)) + _inner(exc.field)) from None
    return data


def _from_pairs(pairs: list[Any], *, source: str, kind: str) -> dict[str, Any]:
    """The reference implementation's `[{key, value}, ...]` as a mapping; a key twice
    is refused, as in an object."""
    found: dict[str, Any] = {}
    for index, pair in enumerate(pairs):
        at = f"variables[{index}]"
        if not isinstance(pair, dict) or set(pair) != {"key", "value"}:
            raise VariableError(f"expected {kind} of variable values, or a list of "
                                "entries with exactly `key` and `value`", source=source,
                                field=at)
        if not isinstance(pair["key"], str) or not pair["key"]:
            raise VariableError("the key must be a non-empty string", source=source,
                                field=f"{at}.key")
        if pair["key"] in found:
            raise VariableError(f"variable {pair['key']!r} is given twice", source=source,
                                field=f"{at}.key")
        found[pair["key"]] = pair["value"]
    return found


def _inner(field: str | None) -> str:
    return "" if not field else field if field.startswith("[") else f".{field}"


def read_variables_option(option: str) -> tuple[dict[str, Any], str]:
    """The CLI's `--variables JSON|@FILE|FILE`: the overrides and the source to report
    errors with. Either form may be an object or a list of `{key, value}`.

    A file is read up to the variables size limit; a `.json` file is JSON,
    any other YAML (with the same refusals as a manifest).
    """
    inline = option.lstrip()[:1] in ("{", "[")
    if not option.startswith("@") and (inline or not Path(option).is_file()):
        return parse_variables_json(option), "--variables"
    # `@FILE`, or a plain path to a file (as the reference's `--variables FILE`).
    path = Path(option[1:] if option.startswith("@") else option)
    source = str(path)
    raw = read_bounded(path, current_limits().variables_bytes, what="variables file",
                       error=VariableError, missing=VariablesNotFound)
    text = decode_utf8(raw, source=source, error=VariableError)
    yaml_format = path.suffix.lower() != ".json"
    return parse_variables_json(text, source=source, yaml_format=yaml_format), source
