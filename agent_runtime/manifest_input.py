"""Reading manifest files and reporting what is wrong with them.

Every problem a user can make in a manifest ends up as one `ManifestError`
naming the file, the field as the user wrote it and the reason:

    release.agent.yaml: steps[1].outputVariable: 'brief.draft' contains a dot; ...

This module owns that translation: the strict base model every schema model
derives from, `rule_error` for cross-field rules, the structure guard run
before pydantic, and YAML/JSON reading; `manifest_errors` turns a pydantic
`ValidationError` into a `ManifestError`.

Reading is bounded (`agent_runtime.limits`): a file is read up to the
manifest size limit and no further; YAML is parsed by libyaml when it is
installed (`yaml.CSafeLoader`, ten times faster than the pure-Python
`SafeLoader`), both refusing the same things: a key written twice, a
non-scalar key, an integer past the digit limit, an impossible date, and
(as any safe loader) Python tags.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from datetime import date, datetime, time
from pathlib import Path
from typing import Annotated, Any, ClassVar

import yaml
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from agent_runtime.document_paths import PathPart, format_path, quote, unique_pairs
from agent_runtime.errors import InvalidInput, ManifestError, ManifestNotFound
from agent_runtime.excerpts import printable
from agent_runtime.limits import (
    current_limits,
    decode_utf8,
    describe_size,
    read_bounded,
)

JsonObject = dict[str, Any]
NonEmptyStr = Annotated[str, Field(min_length=1)]


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
        # A model's validator is built when it is first used, not when its
        # module is imported: `validate` builds the one for the manifest it
        # reads (its step models' schemas inside it), not one per model.
        defer_build=True,
    )


def rule_error(reason: str, *at: PathPart) -> PydanticCustomError:
    """A schema rule broken at sub-path `at` (aliases) of the model being validated.

    The reason travels as a context value rather than as the template, so
    braces in user text (a step id like `{x}`) are never interpreted.
    """
    return PydanticCustomError("manifest_rule", "{reason}", {"reason": reason, "at": at})


def describe(value: Any) -> str:
    """A value as a YAML/JSON user would name it: `a string ('5')`, `a list`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int) and value.bit_length() > 128:
        return f"a number ({_digits(value):,} digits)"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({quote(value, 40)})"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _digits(value: int) -> int:
    """About how many decimal digits `value` has, without str() (refused past 4,300)."""
    return max(1, int(value.bit_length() * 0.30103) + 1)


def clip(text: str, limit: int = 160) -> str:
    """A library's message made one short, inert line (it may quote the input)."""
    text = printable(text, multiline=False)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# -- reading files -----------------------------------------------------------

_ConstructorError = yaml.constructor.ConstructorError
_STR_TAG = "tag:yaml.org,2002:str"


class _KeyNotText(yaml.YAMLError):
    """A mapping key YAML reads as something other than text (`on:`, `yes:`, `1:`):
    where it is (the path of the key, as written) and what YAML made of it."""

    def __init__(self, path: list[PathPart], written: str, value: Any,
                 mark: yaml.Mark | None) -> None:
        super().__init__(written)
        self.path, self.written, self.value, self.mark = path, written, value, mark

    @property
    def reason(self) -> str:
        where = f" (line {self.mark.line + 1}, column {self.mark.column + 1})" if self.mark \
            else ""
        return (f"YAML reads the key {quote(self.written, 40)}{where} as {describe(self.value)}, "
                f"and mapping keys must be text: quote it ('{self.written[:40]}':)")


def _path_to(root: yaml.Node, target: yaml.Node) -> list[PathPart]:
    """The path from `root` to the key node `target`, keys as written (`[]` if not found).

    Walked only to report an error, once, over the composed document: each node
    is visited once however often YAML aliases repeat it."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, list[PathPart]]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                written = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                if key is target:
                    return [*path, written]
                stack.append((value, [*path, written]))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, [*path, index]) for index, item in enumerate(node.value))
    return []


class _StrictConstruction:
    """What both YAML loaders refuse beyond a safe loader's own refusals.

    - a key written twice in one mapping: plain safe_load keeps the last
      without a word, so a manifest could silently lose a field (the
      reference implementation rejects it);
    - a key that is a list or mapping (`? [a, b]`), which no JSON document has;
    - an integer past the digit limit, and a date that does not exist, which
      would otherwise escape as ValueError from the constructor;
    - a key YAML reads as anything but text (`on:`, `yes:`, `~:`, `1:`; a
      manifest is JSON, whose keys are text), named by its path as written.
    """

    yaml_constructors: ClassVar[dict[Any, Any]]
    yaml_implicit_resolvers: ClassVar[dict[Any, Any]]

    def resolve(self, kind: type[yaml.Node], value: str, implicit: tuple[bool, bool]) -> str:
        # The resolver's own answer, reached sooner: PyYAML's `resolve` is
        # Python even under libyaml and ran for a third of a load's time. A
        # quoted scalar is a string; so is a plain one whose first character
        # starts no implicit type (bool, null, int, float, date, merge...).
        if kind is not yaml.ScalarNode:
            return super().resolve(kind, value, implicit)  # type: ignore[misc, no-any-return]
        if not implicit[0] or (value and value[0] not in self.yaml_implicit_resolvers):
            return _STR_TAG
        # The rest (true, 12, team-3, type...) depend on the text alone, and repeat.
        tags: dict[str, str] = self.__dict__.setdefault("_plain_tags", {})
        tag = tags.get(value)
        if tag is None:
            tag = tags[value] = super().resolve(kind, value, implicit)  # type: ignore[misc]
        return tag

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _ConstructorError(None, None, "a mapping key must be a plain value, "
                                        "not a list or a mapping", key_node.start_mark)
            key = key_node.value if key_node.tag == _STR_TAG else \
                self.construct_object(key_node, deep=deep)  # type: ignore[attr-defined]
            if not isinstance(key, str):
                root = self.__dict__.get("_document")
                raise _KeyNotText(_path_to(root, key_node) if root is not None else [],
                                  str(key_node.value), key, key_node.start_mark)
            if key in seen:
                raise _ConstructorError(None, None, f"found duplicate key {_key_text(key)}",
                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc, no-any-return]

    def construct_document(self, node: yaml.Node) -> Any:
        self.__dict__["_document"] = node  # for `_path_to`, when a key is refused
        return super().construct_document(node)  # type: ignore[misc]

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(node.value).replace("_", "").lstrip("+-")
        digits = current_limits().max_integer_digits
        if len(text) > digits + 2:  # room for a 0x/0o/0b prefix
            raise _ConstructorError(None, None, f"an integer with more than {digits} digits",
                                    node.start_mark)
        return yaml.constructor.SafeConstructor.construct_yaml_int(self, node)  # type: ignore[arg-type]

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> date | datetime:
        try:
            return yaml.constructor.SafeConstructor.construct_yaml_timestamp(
                self, node)  # type: ignore[arg-type]
        except (ValueError, OverflowError) as exc:  # 2024-13-45: it looks like a date
            raise _ConstructorError(None, None, f"not a valid date or time ({exc})",
                                    node.start_mark) from None


def _key_text(key: Any) -> str:
    return quote(key) if isinstance(key, str) else repr(key)


class _PureLoader(_StrictConstruction, yaml.SafeLoader):
    """The pure-Python safe loader, refusing what `_StrictConstruction` refuses."""


_LOADERS: dict[str, type[Any]] = {"pure": _PureLoader}
if hasattr(yaml, "CSafeLoader"):  # PyYAML built with libyaml

    class _LibyamlLoader(_StrictConstruction, yaml.CSafeLoader):
        """libyaml's parser with the safe constructor, refusing what `_StrictConstruction` does."""

    _LOADERS["libyaml"] = _LibyamlLoader

for _loader in _LOADERS.values():
    _loader.add_constructor("tag:yaml.org,2002:int", _StrictConstruction.construct_yaml_int)
    _loader.add_constructor("tag:yaml.org,2002:timestamp",
                            _StrictConstruction.construct_yaml_timestamp)

YAML_LOADERS = tuple(_LOADERS)
"""The YAML loaders available here, fastest last: `pure`, and `libyaml` when built in."""
YAML_LOADER = YAML_LOADERS[-1]
"""The loader `parse_document` uses (tests switch it to prove both refuse the same)."""


def _bounded_int(text: str) -> int:
    digits = current_limits().max_integer_digits
    if len(text.lstrip("-")) > digits:
        raise ValueError(f"an integer with more than {digits} digits")
    return int(text)


def parse_document(text: str, *, source: str, json_format: bool = False,
                   limit: int | None = None, error: type[InvalidInput] = ManifestError) -> Any:
    """YAML (safe loading, duplicate keys refused) or, with `json_format`, JSON text -> data.

    `limit` bounds the text in characters (default: the manifest size limit);
    every problem is `error` (a `ManifestError` unless told) naming `source`.
    """
    bound = current_limits().manifest_bytes if limit is None else limit
    if len(text) > bound:
        raise error(f"larger than the limit of {describe_size(bound)}", source=source)
    try:
        if json_format:
            return json.loads(text, object_pairs_hook=unique_pairs, parse_int=_bounded_int)
        return yaml.load(text, Loader=_LOADERS[YAML_LOADER])  # safe: no arbitrary objects
    except json.JSONDecodeError as exc:
        raise error(f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                    source=source) from None
    except _KeyNotText as exc:
        raise error(exc.reason, source=source, field=format_path(exc.path) or None) from None
    except ValueError as exc:  # a duplicate key or a huge integer in JSON
        raise error(f"malformed JSON: {clip(str(exc))}", source=source) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or "syntax error"
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise error(f"malformed YAML{where}: {clip(problem)}", source=source) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, e.g. NUL
        raise error(f"malformed YAML at character {exc.position + 1}: "
                    f"{clip(str(exc).split(chr(10))[0])}", source=source) from None
    except yaml.YAMLError as exc:
        raise error(f"malformed YAML: {clip(str(exc))}", source=source) from None
    except RecursionError:
        raise error("nested too deeply to parse (the limit is "
                    f"{current_limits().max_depth} levels)", source=source) from None


def read_document(path: Path) -> dict[str, Any]:
    """A manifest file's top-level mapping; `.json` files are JSON, the rest YAML.

    At most the manifest size limit is read: `/dev/zero` is refused at once.
    """
    source = str(path)
    raw = read_bounded(path, current_limits().manifest_bytes, what="manifest",
                       error=ManifestError, missing=ManifestNotFound)
    text = decode_utf8(raw, source=source, error=ManifestError)
    data = parse_document(text, source=source, json_format=path.suffix.lower() == ".json")
    if not isinstance(data, dict):
        got = "an empty document" if data is None else describe(data)
        raise ManifestError(f"expected a mapping at the top level, got {got}", source=source)
    return data


# -- the structure guard -----------------------------------------------------


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(text: str, max_length: int) -> str | None:
    """Why a string cannot be manifest text (too long, a lone surrogate), or None."""
    if len(text) > max_length:
        return f"a string longer than the limit of {max_length:,} characters"
    if not text.isascii() and (found := _SURROGATE.search(text)):
        return (f"contains a lone surrogate (\\u{ord(found[0]):04x}), which is not "
                "Unicode text")
    return None


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
    huge tree), string length and integer size, rejects cycles (a YAML alias
    to an enclosing node), non-string mapping keys, lone surrogates and values
    JSON cannot represent (the manifest is stored and hashed as JSON), all by
    the limits in effect. Iterative, so hostile input cannot exhaust the stack.
    """
    limits = current_limits()
    max_nodes, max_depth = limits.max_values, limits.max_depth
    max_length, huge = limits.max_string_length, 10 ** limits.max_integer_digits
    nodes = 0
    # Depth-first: `keys` is the path to the container being walked and `open_ids`
    # the containers enclosing it (a YAML alias back to one of them is a cycle).
    keys: list[PathPart] = []
    open_ids: list[int] = []
    stack: list[tuple[Any, PathPart, int]] = [(data, "", 0)]

    def refuse(reason: str, depth: int) -> ManifestError:
        return ManifestError(reason, source=source, field=format_path(keys[:depth]) or None)

    while stack:
        value, key, depth = stack.pop()
        del keys[max(depth - 1, 0):], open_ids[depth:]
        if depth:
            keys.append(key)
        nodes += 1
        if nodes > max_nodes:
            raise ManifestError(f"too large: more than {max_nodes:,} values", source=source)
        if depth > max_depth:
            raise ManifestError(f"nested deeper than {max_depth} levels", source=source,
                                field=format_path(keys[:4]) + "...")
        if isinstance(value, dict):
            items: Iterable[tuple[PathPart, Any]] = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        else:
            problem = _scalar_problem(value, max_length, huge)
            if problem:
                raise refuse(problem, depth)
            continue
        if id(value) in open_ids:
            raise refuse("contains itself (a YAML alias to an enclosing node)", depth)
        open_ids.append(id(value))
        pending: list[tuple[Any, PathPart, int]] = []
        for child_key, child in items:
            if isinstance(child_key, str):
                problem = text_problem(child_key, max_length)
                if problem:
                    raise refuse(f"a key {problem.removeprefix('a string ')}", depth + 1)
            elif not isinstance(child_key, int) or isinstance(value, dict):
                raise refuse(f"mapping keys must be strings, got {describe(child_key)}; "
                             "quote it", depth + 1)
            if isinstance(child, str) and child.isascii() and len(child) <= max_length:
                nodes += 1  # the common leaf, checked without a trip round the loop
                continue
            pending.append((child, child_key, depth + 1))
        if nodes > max_nodes:
            raise ManifestError(f"too large: more than {max_nodes:,} values", source=source)
        stack.extend(reversed(pending))


def _scalar_problem(value: Any, max_length: int, huge: int) -> str | None:
    if isinstance(value, str):
        return text_problem(value, max_length)
    if isinstance(value, int) and not isinstance(value, bool) and not -huge < value < huge:
        return f"an integer with more than {len(str(huge)) - 1} digits"
    return _not_json(value)


# -- pydantic errors -> ManifestError ------------------------------------------
