"""JSON Schema: the one place a schema is checked, compiled and applied.

Every JSON Schema the runtime applies goes through `compile_schema`: a prompt
step's `outputSchema` (checked when the manifest is validated, applied to the
model's answer), an MCP tool's input schema (from its server, when a step
starts) and a Python tool's schema (derived from its signature). Schemas are
hostile input — a manifest comes from a tenant, a tool schema from whatever
server a connection reaches — so compiling one refuses, naming the place in
it (`SchemaRefused.at`), whatever could make applying it fetch, hang or crash:

- Size: at most `SchemaLimits.max_bytes` of canonical JSON (64 KiB) and
  `max_depth` nested objects and arrays (32).
- Dialect: draft-04, -06, -07 or 2020-12, by `$schema` (2020-12 without one).
  Draft-03, 2019-09 and unknown `$schema` URIs are refused: their keywords
  (`$recursiveRef`, a custom vocabulary) would be applied differently or not
  at all. `$schema` is only ever looked up, never fetched.
- References are local: `$ref`, `$dynamicRef` and `$recursiveRef` must be
  fragments of the same schema (`#`, `#/$defs/x`, `#anchor`) and resolve to
  a schema. An `$id` (draft-04: `id`) may name the root; below it only a
  plain-name fragment (`#foo`, drafts 6 and 7) is allowed, since any other
  re-bases the references under it onto another document. The `referencing`
  registry that resolves references retrieves nothing: its retrieve
  function refuses every URI, so a reference this check missed fails instead
  of reaching the network or the file system. jsonschema's deprecated
  `RefResolver`, which fetches, is never used.
- No cycle without progress: `$ref`s and the applicators that apply to the
  same value (`allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`,
  `dependentSchemas`) must not lead back to where they started, or the same
  schema would be applied to the same value forever (`$ref: "#"` is the
  smallest such loop). Recursion through `properties`, `items` and the like
  is fine — a tree schema — since each step goes down into a finite value.
- Regular expressions run on RE2 (`google-re2`), whose matching time is
  linear in the text whatever the pattern (`^(a+)+$` included): `pattern`,
  `patternProperties` and the `additionalProperties` and
  `unevaluatedProperties` that depend on them are re-implemented on it, and
  the metaschema's `format: regex` check of a schema's own patterns uses it.
  RE2 was preferred to a backtracking engine with a timeout (the `regex`
  package) because its answer does not depend on how busy the machine is: an
  answer validates the same way on every attempt of a run. RE2 has no
  backreferences and no look-around; a pattern it cannot compile is refused,
  naming it. ECMA-262's `\\uXXXX` escapes are accepted, and `$` is the end of
  the text as in ECMA-262 (Python's `re` also matches before a final
  newline). `format` stays an annotation (2020-12's default), so no value of
  an instance is ever compiled as a pattern.
- Cost: one validation evaluates at most `max_steps` keywords (250,000; a
  reference counts as ten: about a second at worst); past that, or when the
  value nests deeper than Python can follow, it stops with `SchemaRefused`
  instead of running on. Counting steps rather than time keeps the outcome
  the same on a loaded machine.

Metaschema violations are `SchemaInvalid`, a kind of `SchemaRefused`: a
caller that can let someone else validate (an MCP server checks its own
arguments) may tolerate those and still refuses the unsafe ones. Both live in
`agent_runtime.schema_refusals`, so a module that only catches them does not
load this one (and jsonschema with it): it is imported where a schema is
compiled.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import unquote

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from agent_runtime.excerpts import EXCERPT_LIMIT, excerpt
from agent_runtime.schema_keywords import (
    REFERENCE_KEYWORDS,
    TooCostly,
    UnusablePattern,
    on_re2,
    regex_format,
    regex_problem,
    step_budget,
)
from agent_runtime.schema_precheck import precheck
from agent_runtime.schema_refusals import SchemaInvalid, SchemaPath, SchemaRefused
from agent_runtime.serde import canonical_json

__all__ = ["DEFAULT_LIMITS", "CompiledSchema", "SchemaInvalid", "SchemaLimits", "SchemaRefused",
           "compile_schema"]


@dataclass(frozen=True)
class SchemaLimits:
    """How big a schema may be, and how much one validation may cost."""

    max_bytes: int = 64 * 1024  # canonical JSON, UTF-8
    max_depth: int = 32  # nested objects and arrays
    max_steps: int = 250_000  # keyword evaluations per validation


DEFAULT_LIMITS = SchemaLimits()


# -- dialects ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Dialect:
    name: str
    validator: type[Validator]  # the instance validator: counted, RE2
    metaschema: type[Validator]  # jsonschema's own class, to check the schema itself
    id_keyword: str


def _dialect(name: str, base: type[Validator], id_keyword: str) -> _Dialect:
    return _Dialect(name, on_re2(base), base, id_keyword)


_DEFAULT_DIALECT = _dialect("2020-12", jsonschema.Draft202012Validator, "$id")
_DIALECTS = {
    "https://json-schema.org/draft/2020-12/schema": _DEFAULT_DIALECT,
    "http://json-schema.org/draft-07/schema": _dialect(
        "draft-07", jsonschema.Draft7Validator, "$id"),
    "http://json-schema.org/draft-06/schema": _dialect(
        "draft-06", jsonschema.Draft6Validator, "$id"),
    "http://json-schema.org/draft-04/schema": _dialect(
        "draft-04", jsonschema.Draft4Validator, "id"),
}
_REFUSED_DIALECTS = {"https://json-schema.org/draft/2019-09/schema": "2019-09",
                     "http://json-schema.org/draft-03/schema": "draft-03"}


def _dialect_of(schema: Mapping[str, Any]) -> _Dialect:
    uri = schema.get("$schema")
    if uri is None:
        return _DEFAULT_DIALECT
    if not isinstance(uri, str):
        raise SchemaRefused("$schema must be a string", ("$schema",))
    key = uri.removesuffix("#")
    known = _DIALECTS.get(key)
    if known is not None:
        return known
    supported = "draft-04, draft-06, draft-07 or 2020-12"
    if key in _REFUSED_DIALECTS:
        raise SchemaRefused(f"JSON Schema {_REFUSED_DIALECTS[key]} is not supported: use "
                            f"{supported} (the default)", ("$schema",))
    raise SchemaRefused(f"unknown $schema {excerpt(uri)}: use the URI of {supported}, or "
                        "leave $schema out for 2020-12", ("$schema",))


# -- references ------------------------------------------------------------------


def _refuse_retrieval(uri: str) -> NoReturn:
    # Nothing is ever fetched or read: every reference must be found in the schema.
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs


_REGISTRY: referencing.Registry[Any] = referencing.Registry(  # type: ignore[call-arg]  # attrs
    retrieve=_refuse_retrieval)

# Values, not schemas: nothing in them is a keyword.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
# Keywords whose schemas apply to the same value as the schema holding them.
_IN_PLACE = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else"})
# Keywords holding a map of names to schemas.
_NAME_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                        "dependentSchemas", "dependencies"})
_IN_PLACE_MAPS = frozenset({"dependentSchemas", "dependencies"})


@dataclass
class _Edge:
    target: int  # id() of the schema object
    at: SchemaPath  # the keyword that makes it
    reference: bool


@dataclass
class _Survey:
    """The schema objects of a document, the in-place edges between them and its
    references."""

    nodes: dict[int, SchemaPath]
    edges: dict[int, list[_Edge]]
    references: list[tuple[int, str, SchemaPath]]


def _check_size(schema: Any, limits: SchemaLimits) -> str:
    """The canonical JSON of `schema`, once its depth and size are within limits."""
    stack: list[tuple[Any, SchemaPath]] = [(schema, ())]
    visited = 0
    while stack:
        value, path = stack.pop()
        visited += 1
        if visited > limits.max_bytes:  # every value is at least a byte of JSON
            raise SchemaRefused(f"the schema is larger than {limits.max_bytes} bytes")
        items: Any = (value.items() if isinstance(value, Mapping)
                      else enumerate(value) if isinstance(value, list) else ())
        for key, child in items:
            if isinstance(child, Mapping | list):
                if len(path) + 1 >= limits.max_depth:
                    raise SchemaRefused(f"the schema nests objects and arrays more than "
                                        f"{limits.max_depth} deep", (*path, key))
                stack.append((child, (*path, key)))
    try:
        text = canonical_json(schema)
    except (TypeError, ValueError) as error:
        raise SchemaRefused(f"the schema is not JSON: {error}") from error
    if len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        raise SchemaRefused(f"the schema is larger than {limits.max_bytes} bytes")
    return text


def _check_reference(value: Any, at: SchemaPath) -> None:
    if not isinstance(value, str):
        raise SchemaRefused(f"{at[-1]} must be a string", at)
    if not value.startswith("#"):
        raise SchemaRefused(f"reference {excerpt(value)} is refused: only references within "
                            "the schema itself ('#', '#/$defs/...', '#anchor') are followed, "
                            "never other files or URLs", at)


def _survey(root: Any, dialect: _Dialect, survey: _Survey, at: SchemaPath) -> None:
    """Add `root` (at `at`) and every schema object under it to `survey`, checking
    references, ids and patterns on the way."""
    stack: list[tuple[Any, SchemaPath]] = [(root, at)]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, Mapping) or id(node) in survey.nodes:
            continue
        survey.nodes[id(node)] = path
        edges = survey.edges.setdefault(id(node), [])
        for key, value in node.items():
            where = (*path, key)
            if key in _DATA_KEYWORDS:
                continue
            if key in REFERENCE_KEYWORDS:
                _check_reference(value, where)
                survey.references.append((id(node), value, where))
                continue
            if key == dialect.id_keyword:
                _check_id(value, where, root=not path)
            if key == "pattern" and isinstance(value, str):
                _refuse_pattern(value, where)
            if key == "patternProperties" and isinstance(value, Mapping):
                for pattern in value:
                    _refuse_pattern(pattern, (*where, pattern))
            children: list[tuple[Any, SchemaPath]] = []
            if key in _NAME_MAPS and isinstance(value, Mapping):
                children = [(child, (*where, name)) for name, child in value.items()]
            elif isinstance(value, Mapping):
                children = [(value, where)]
            elif isinstance(value, list):
                children = [(child, (*where, index)) for index, child in enumerate(value)]
            for child, child_at in children:
                if not isinstance(child, Mapping):
                    continue
                if key in _IN_PLACE or key in _IN_PLACE_MAPS:
                    edges.append(_Edge(id(child), child_at, reference=False))
                stack.append((child, child_at))


def _check_id(value: Any, at: SchemaPath, *, root: bool) -> None:
    if not isinstance(value, str):
        raise SchemaRefused(f"{at[-1]} must be a string", at)
    if not root and not value.startswith("#"):
        raise SchemaRefused(f"an embedded {at[-1]} ({excerpt(value)}) is not supported: it "
                            "would resolve the references under it against another "
                            "document; keep one $id at the root and use $defs", at)


def _refuse_pattern(pattern: str, at: SchemaPath) -> None:
    problem = regex_problem(pattern)
    if problem is not None:
        raise SchemaRefused(problem, at)


def _pointer_path(reference: str, fallback: SchemaPath) -> SchemaPath:
    if not reference.startswith("#/"):
        return fallback
    return tuple(unquote(part).replace("~1", "/").replace("~0", "~")
                 for part in reference[2:].split("/"))


def _resolve_references(schema: Mapping[str, Any], dialect: _Dialect, survey: _Survey) -> None:
    """Resolve every reference within the schema, adding its edge to `survey`."""
    specification = referencing.jsonschema.specification_with(
        dialect.metaschema.META_SCHEMA.get("$schema", ""),
        default=referencing.jsonschema.DRAFT202012)
    resolver = _REGISTRY.resolver_with_root(specification.create_resource(schema))
    done = 0
    while done < len(survey.references):  # resolving may survey more of the document
        source, reference, at = survey.references[done]
        done += 1
        try:
            target = resolver.lookup(reference).contents
        except referencing.exceptions.Unresolvable as error:
            raise SchemaRefused(f"reference {excerpt(reference)} does not resolve within the "
                                "schema", at) from error
        if isinstance(target, bool):
            continue
        if not isinstance(target, Mapping):
            raise SchemaRefused(f"reference {excerpt(reference)} does not point at a schema "
                                "(an object or a boolean)", at)
        if id(target) not in survey.nodes:
            _survey(target, dialect, survey, _pointer_path(reference, at))
        survey.edges[source].append(_Edge(id(target), at, reference=True))


def _refuse_cycles(survey: _Survey) -> None:
    """Refuse a loop of in-place edges: it applies a schema to the same value forever."""
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start in survey.nodes:
        if start in state:
            continue
        state[start] = 1
        stack: list[tuple[int, Iterator[_Edge]]] = [(start, iter(survey.edges.get(start, ())))]
        trail: list[_Edge] = []  # trail[i] leads from stack[i] to stack[i + 1]
        while stack:
            node, edges = stack[-1]
            edge = next(edges, None)
            if edge is None:
                state[node] = 2
                stack.pop()
                if trail:
                    trail.pop()
                continue
            seen = state.get(edge.target)
            if seen == 1:
                entered = next(i for i, (each, _) in enumerate(stack) if each == edge.target)
                loop = [*trail[entered:], edge]
                closing = next(each for each in reversed(loop) if each.reference)
                raise SchemaRefused("reference cycle: this reference leads back to a schema "
                                    "it is part of without going down into the value, so "
                                    "checking a value against it would never end",
                                    closing.at)
            if seen is None:
                state[edge.target] = 1
                stack.append((edge.target, iter(survey.edges.get(edge.target, ()))))
                trail.append(edge)


# -- compiling and applying ----------------------------------------------------------


class CompiledSchema:
    """A checked schema, ready to validate values (see the module docstring)."""

    def __init__(self, validator: Validator, limits: SchemaLimits) -> None:
        self._validator = validator
        self._limits = limits
        # Values it calls surely valid skip jsonschema: a tool call's arguments
        # are checked on every call (agent_runtime/schema_precheck.py).
        self._surely_valid = precheck(validator.schema)

    @property
    def schema(self) -> Any:
        return self._validator.schema

    def first_error(self, instance: Any) -> ValidationError | None:
        """The most relevant way `instance` fails the schema (jsonschema's
        `best_match`), or None when it is valid.

        Raises `SchemaRefused` when the check cannot finish: it would take more
        than `max_steps` keyword evaluations, or the value nests deeper than
        the schema's recursion can be followed.
        """
        if self._surely_valid is not None and self._surely_valid(instance):
            return None
        try:
            with step_budget(self._limits.max_steps):
                problem: ValidationError | None = jsonschema.exceptions.best_match(
                    self._validator.iter_errors(instance))
            return problem
        except TooCostly:
            raise SchemaRefused(f"checking the value against the schema takes more than "
                                f"{self._limits.max_steps} steps") from None
        except RecursionError:
            raise SchemaRefused("the value nests too deeply to be checked against the "
                                "schema") from None
        except referencing.exceptions.Unresolvable as error:  # compile_schema resolved them all
            raise SchemaRefused(f"reference {excerpt(str(error.ref))} does not resolve "
                                "within the schema") from None
        except UnusablePattern as error:  # compile_schema checked them all
            raise SchemaRefused(str(error)) from None

    def failure(self, instance: Any) -> str | None:
        """How `instance` fails the schema, in words safe to show and log, or None.

        jsonschema's own message repeats the offending value whole (a model's
        answer can be megabytes, or a prompt echoed back), so this names where
        in the value, the keyword and the schema path, and quotes the value
        only as an excerpt. Raises `SchemaRefused` as `first_error` does.
        """
        problem = self.first_error(instance)
        if problem is None:
            return None
        where = _plain("/".join(str(part) for part in problem.absolute_path) or "(root)")
        schema_path = "/".join(str(part) for part in problem.absolute_schema_path) or "(root)"
        return (f"at {where}: the value {excerpt(problem.instance)} fails "
                f"{_plain(str(problem.validator))!r} (schema path {_plain(schema_path)})")


def _plain(path: str) -> str:
    """A path as it is when short and printable (keys may be a model's own), else an excerpt."""
    return path if len(path) <= EXCERPT_LIMIT and path.isprintable() else excerpt(path)


def compile_schema(schema: Any, limits: SchemaLimits = DEFAULT_LIMITS) -> CompiledSchema:
    """Check `schema` (see the module docstring) and compile it for validation.

    Raises `SchemaRefused` naming where in the schema the problem is;
    `SchemaInvalid` when it breaks its dialect's metaschema.
    """
    canonical = _check_size(schema, limits)
    return _compile(canonical, limits)


@functools.lru_cache(maxsize=128)
def _compile(canonical: str, limits: SchemaLimits) -> CompiledSchema:
    # Compiled from a private copy: the caller's object may change after, and
    # equal schemas (a prompt step's, on every answer) compile once.
    schema = json.loads(canonical)
    if isinstance(schema, bool):
        return CompiledSchema(_DEFAULT_DIALECT.validator(schema, registry=_REGISTRY), limits)
    if not isinstance(schema, dict):
        raise SchemaInvalid("a JSON Schema is an object or a boolean")
    try:
        dialect = _dialect_of(schema)
        survey = _Survey(nodes={}, edges={}, references=[])
        _survey(schema, dialect, survey, ())
        _check_metaschema(schema, dialect)
        _resolve_references(schema, dialect, survey)
        _refuse_cycles(survey)
    except RecursionError:  # the checks are iterative; this is a last line of defence
        raise SchemaRefused("the schema nests too deeply") from None
    return CompiledSchema(dialect.validator(schema, registry=_REGISTRY), limits)


@functools.cache
def _metaschema_validator(base: type[Validator]) -> Validator:
    """`base`'s metaschema as a validator, with its format checks but RE2's
    `regex` (a pattern the instance validator could not run is not valid)."""
    checker = jsonschema.FormatChecker(())
    checker.checkers = dict(base.FORMAT_CHECKER.checkers)
    checker.checks("regex")(regex_format)
    meta = jsonschema.validators.validator_for(base.META_SCHEMA, default=base)
    return meta(base.META_SCHEMA, format_checker=checker, registry=_REGISTRY)


def _check_metaschema(schema: Mapping[str, Any], dialect: _Dialect) -> None:
    problem = jsonschema.exceptions.best_match(
        _metaschema_validator(dialect.metaschema).iter_errors(schema))
    if problem is not None:
        if problem.validator == "format" and problem.validator_value == "regex":
            reason = regex_problem(str(problem.instance)) or problem.message
        else:
            reason = f"not a valid JSON Schema ({dialect.name}): {problem.message}"
        raise SchemaInvalid(reason, tuple(problem.absolute_path))
