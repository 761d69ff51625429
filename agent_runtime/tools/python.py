"""Python functions as tools: `@agent_runtime.tool`.

The decorator derives the tool's JSON schema from the signature and the
docstring (first paragraph = description; a Google-style `Args:` section gives
parameter descriptions). A parameter annotated `ToolContext` receives the call
context — run id, step path, attempt and the call's stable idempotency key —
and is left out of the schema.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin, overload

from stores.records import ArtifactRef

from agent_runtime.models.base import ToolSpec
from agent_runtime.schema_refusals import SchemaRefused
from agent_runtime.tools.threads import TOOL_THREADS

if TYPE_CHECKING:
    from agent_runtime.schemas import CompiledSchema

ArtifactSink = Callable[[bytes, str], ArtifactRef]


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the call it serves."""

    run_id: str
    step_path: str
    idempotency_key: str
    attempt: int
    tool_name: str = ""
    artifact_sink: ArtifactSink | None = field(default=None, repr=False, compare=False)

    def save_artifact(self, data: bytes, *,
                      media_type: str = "application/octet-stream") -> ArtifactRef:
        """Keep bytes in the run's artifact store; the ref is saved with the run.

        Artifacts are content-addressed, so saving the same bytes again on a
        retried call adds nothing.
        """
        if self.artifact_sink is None:
            raise RuntimeError("this runtime has no artifact store (pass --artifacts DIR, or "
                               "AgentRuntime(artifacts=LocalArtifactStore(DIR)))")
        return self.artifact_sink(data, media_type)


class ToolArgumentsError(ValueError):
    """The model called a tool with arguments that break its schema."""


def check_arguments(tool: str, schema: CompiledSchema, arguments: dict[str, Any]) -> None:
    """Raise `ToolArgumentsError` when `arguments` break the tool's schema; the
    message quotes the model's values only as excerpts."""
    try:
        failure = schema.failure(arguments)
    except SchemaRefused as refused:
        raise ToolArgumentsError(f"{tool}: {refused.reason}") from refused
    if failure is not None:
        raise ToolArgumentsError(f"{tool}: arguments {failure}")


_SIMPLE_TYPES: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    Any: {},
}


def annotation_schema(annotation: Any) -> dict[str, Any]:
    """JSON schema of a Python annotation (the common shapes tools use)."""
    if annotation in _SIMPLE_TYPES:
        return dict(_SIMPLE_TYPES[annotation])
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set):
        schema: dict[str, Any] = {"type": "array"}
        if args and args[0] is not Ellipsis:
            schema["items"] = annotation_schema(args[0])
        return schema
    if origin is dict or annotation is dict:
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = annotation_schema(args[1])
        return schema
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        options = [annotation_schema(arg) for arg in args]
        return {"anyOf": options}
    model_schema = getattr(annotation, "model_json_schema", None)
    if callable(model_schema):
        result: dict[str, Any] = model_schema()
        return result
    return {}


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(first paragraph, {parameter: description from an `Args:` section})."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    in_args = False
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args = True
        elif in_args and line.strip() and not line.startswith(" "):
            in_args = False
        elif in_args and (match := _ARG_LINE.match(line)):
            params[match.group(1)] = match.group(2).strip()
    return " ".join(summary), params


class Tool:
    """A registered tool: name, JSON schema, idempotency, and the function."""

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None,
                 description: str | None = None, idempotent: bool = True) -> None:
        from agent_runtime.schemas import compile_schema  # noqa: PLC0415 - jsonschema, when used

        self.fn = fn
        self.name = name or fn.__name__
        self.idempotent = idempotent
        doc_description, doc_params = _parse_docstring(fn.__doc__)
        self.description = description or doc_description or self.name
        hints = typing.get_type_hints(fn)
        signature = inspect.signature(fn)
        self._context_param: str | None = None
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param in signature.parameters.values():
            annotation = hints.get(param.name, Any)
            if annotation is ToolContext:
                self._context_param = param.name
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            schema = annotation_schema(annotation)
            if param.name in doc_params:
                schema["description"] = doc_params[param.name]
            if param.default is param.empty:
                required.append(param.name)
            elif param.default is None or isinstance(param.default, str | int | float | bool):
                schema["default"] = param.default
            properties[param.name] = schema
        self.parameters: dict[str, Any] = {"type": "object", "properties": properties,
                                           "additionalProperties": False}
        if required:
            self.parameters["required"] = required
        self._schema = compile_schema(self.parameters)
        self._is_async = inspect.iscoroutinefunction(fn)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def check_arguments(self, arguments: dict[str, Any]) -> None:
        check_arguments(self.name, self._schema, arguments)

    async def invoke(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        """Call the function; a plain function runs in a worker thread so the
        event loop keeps renewing the run's lease meanwhile."""
        self.check_arguments(arguments)
        kwargs = dict(arguments)
        if self._context_param is not None:
            kwargs[self._context_param] = context
        if self._is_async:
            return await self.fn(**kwargs)
        result = await TOOL_THREADS.call(self.fn, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, idempotent={self.idempotent})"


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(*, name: str | None = None, description: str | None = None,
         idempotent: bool = True) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
         description: str | None = None,
         idempotent: bool = True) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Register a Python function as a tool.

    `@tool` or `@tool(name=..., description=..., idempotent=False)`.
    `idempotent=False` marks a tool whose repeat is unsafe: after a crash
    between dispatch and checkpoint the run suspends with `effect-unknown`
    instead of calling it again.
    """
    def wrap(function: Callable[..., Any]) -> Tool:
        return Tool(function, name=name, description=description, idempotent=idempotent)

    if fn is not None:
        return wrap(fn)
    return wrap
