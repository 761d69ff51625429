"""Agent and run manifests, schema 1.0: models, parsing, validation and the hash.

The schema is the reference TypeScript implementation's (`clearideas/agent-runtime`):
every object is strict (an unknown field is an error), fields are camelCase in
files and snake_case in Python. Everything a manifest can get wrong is reported
as a `ManifestError` naming the file, the field as the user wrote it
(`steps[0].steps[2].loop.maxIterations`) and the reason, before a run exists.

Cross-field rules raise `rule_error(reason, *at)`; `at` is the offending
sub-path relative to the model that found it, appended to pydantic's location
when the error is reported (see `agent_runtime.manifest_input`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    Discriminator,
    Field,
    PositiveInt,
    StringConstraints,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from agent_runtime.manifest_duplicates import duplicate_names
from agent_runtime.manifest_errors import manifest_error_from_validation
from agent_runtime.manifest_input import (
    JsonObject,
    NonEmptyStr,
    SchemaModel,
    check_structure,
    rule_error,
)
from agent_runtime.messages import PromptMessage, history_problem
from agent_runtime.serde import canonical_json
from agent_runtime.state_projection import projection_problem
from agent_runtime.step_kinds import (
    FILE_SPELLING,
    Step,
    StepBase,
    check_condition,
    register_step_model,
)
from agent_runtime.variables import VariableKey, VariablePath, VariableType, value_matches_type

SCHEMA_VERSION = "1.0"
DEFAULT_MAX_TOOL_CALLS_PER_ITERATION = 25

_CONNECTION_ALIAS = re.compile(r"[a-z][a-z0-9-]*")


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise rule_error(f"{value!r} is not an http or https URL")
    return value


# RFC 9110 `token`: what an HTTP header name may be made of.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def header_name_problem(name: str) -> str | None:
    """Why `name` cannot be an HTTP header name, or None."""
    if _HEADER_NAME.fullmatch(name):
        return None
    return "a header name is letters, digits and !#$%&'*+-.^_`|~ only"


def header_value_problem(value: str) -> str | None:
    """Why `value` cannot be sent as an HTTP header value, or None. The value is
    not quoted: it may be a credential."""
    for index, char in enumerate(value):
        if not ("!" <= char <= "~" or char in " \t"):
            return (f"a header value must be printable ASCII, and this one has U+{ord(char):04X} "
                    f"at position {index}")
    if value != value.strip(" \t"):
        return "a header value must not start or end with a space or a tab"
    return None


def _connection_alias(value: str) -> str:
    if not _CONNECTION_ALIAS.fullmatch(value):
        raise rule_error(
            f"{value!r} is not a valid alias: use a lowercase letter, "
            "then lowercase letters, digits or '-'"
        )
    return value


def _json_schema(schema: JsonObject | None) -> JsonObject | None:
    """A schema the runtime can apply safely (see `agent_runtime.schemas`)."""
    if schema is not None:
        # Imported with the first schema: a manifest without one (and the CLI's
        # start-up) does not load jsonschema.
        from agent_runtime.schemas import SchemaRefused, compile_schema  # noqa: PLC0415

        try:
            compile_schema(schema)
        except SchemaRefused as exc:
            raise rule_error(exc.reason, *exc.at) from exc
    return schema


TrimmedStr = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


# -- models and connections -------------------------------------------------


class ProviderModelRef(SchemaModel):
    """An explicit model: `{provider, model, options?}`."""

    provider: NonEmptyStr
    model: NonEmptyStr
    options: JsonObject | None = None


class ProfileModelRef(SchemaModel):
    """A model profile from the runtime config: `{ref, options?}`."""

    ref: NonEmptyStr
    options: JsonObject | None = None


def _model_kind(value: Any) -> str | None:
    if isinstance(value, ProviderModelRef | ProfileModelRef):
        return "profile" if isinstance(value, ProfileModelRef) else "explicit"
    if not isinstance(value, dict):
        return None
    explicit = "provider" in value or "model" in value
    if "ref" in value:
        return None if explicit else "profile"
    return "explicit" if explicit else None


ModelRef = Annotated[
    Annotated[ProviderModelRef, Tag("explicit")] | Annotated[ProfileModelRef, Tag("profile")],
    Discriminator(
        _model_kind,
        custom_error_type="model_ref",
        custom_error_message="expected a mapping with provider and model, or with ref (not both)",
    ),
]


class VariableDeclaration(SchemaModel):
    key: VariableKey
    type: VariableType
    value: Any = None  # None when absent (see has_default); an explicit null fits no type
    requires_override: bool = False
    description: str | None = None
    metadata: JsonObject | None = None

    @property
    def has_default(self) -> bool:
        return "value" in self.model_fields_set

    @model_validator(mode="after")
    def _value_fits_type(self) -> VariableDeclaration:
        if self.has_default and not value_matches_type(self.value, self.type):
            raise rule_error(f"default value of {self.key!r} must be of type {self.type}", "value")
        return self


class Connection(SchemaModel):
    ref: NonEmptyStr
    alias: Annotated[str, AfterValidator(_connection_alias)] | None = None
    tools: list[NonEmptyStr] | None = None
    mode: Literal["read", "read_write"] | None = None
    required: bool | None = None

    @property
    def effective_alias(self) -> str:
        """The prefix of this connection's tools (`alias__tool`): the alias, else the ref."""
        return self.alias if self.alias is not None else self.ref


class Limits(SchemaModel):
    max_steps: PositiveInt | None = None
    max_messages_per_prompt: PositiveInt | None = None
    max_input_bytes: PositiveInt | None = None
    max_output_bytes: PositiveInt | None = None
    max_tool_calls_per_iteration: PositiveInt | None = None
    provider_timeout_ms: PositiveInt | None = None

    @property
    def tool_calls_per_iteration(self) -> int:
        """The effective limit; the default is not stored so the hash reflects the file."""
        if self.max_tool_calls_per_iteration is None:
            return DEFAULT_MAX_TOOL_CALLS_PER_ITERATION
        return self.max_tool_calls_per_iteration


# -- steps ------------------------------------------------------------------


class CompletionPolicy(SchemaModel):
    on_truncation: Literal["fail", "accept"] | None = None
    require_output: bool | None = None


class PromptStep(StepBase):
    type: Literal["prompt"] = "prompt"
    prompt: str | None = None
    system_prompt: str | None = None
    messages: Annotated[list[PromptMessage], Field(min_length=1)] | None = None
    model: ModelRef | None = None
    output_schema: JsonObject | None = None
    tools: list[str] | None = None
    max_output_tokens: PositiveInt | None = None
    completion_policy: CompletionPolicy | None = None

    _check_output_schema = field_validator("output_schema")(_json_schema)

    @model_validator(mode="after")
    def _one_prompt_form(self) -> PromptStep:
        if self.prompt is not None and self.messages is not None:
            raise rule_error("set either prompt or messages, not both")
        if self.prompt is None and self.messages is None:
            raise rule_error("a prompt step needs prompt or messages")
        if self.messages is not None:
            if self.system_prompt is not None:
                raise rule_error(
                    "cannot be combined with messages; start messages with a system message",
                    "systemPrompt",
                )
            problem = history_problem(self.messages)
            if problem is not None:
                raise rule_error(problem[0], "messages", *problem[1])
        return self


# The most iterations a loop may declare: an index up to it is exact in JSON
# (a double holds every integer up to 2**53 - 1), in every store and in the
# reference's `.safe()` integers. Beyond it a count is not a count any reader
# keeps. (A host may bound loops far lower with its policy.)
MAX_LOOP_ITERATIONS = 2**53 - 1


class LoopSpec(SchemaModel):
    source: str | None = None
    delimiter: str | None = None
    item_variable: VariablePath | None = None
    index_variable: VariablePath | None = None
    condition: str | None = None
    goal: str | None = None
    output_mode: Literal["array", "final"] | None = None
    result_variable: VariablePath | None = None
    max_iterations: Annotated[int, Field(gt=0, le=MAX_LOOP_ITERATIONS)] | None = None

    _check_conditions = field_validator("condition", "goal")(check_condition)

    @model_validator(mode="after")
    def _goal_is_bounded(self) -> LoopSpec:
        if self.goal is not None and self.max_iterations is None:
            raise rule_error("required when the loop has a goal", "maxIterations")
        return self


def _unique_step_ids(steps: Sequence[StepBase]) -> None:
    seen: set[str] = set()
    for index, step in enumerate(steps):
        if step.id in seen:
            raise rule_error(f"duplicate step id {step.id!r} among sibling steps",
                             "steps", index, "id")
        seen.add(step.id)


class LoopStep(StepBase):
    type: Literal["loop"] = "loop"
    child_steps_field: ClassVar[str | None] = "steps"
    loop: LoopSpec
    steps: list[Step]

    @model_validator(mode="after")
    def _unique_children(self) -> LoopStep:
        _unique_step_ids(self.steps)
        return self


class ApprovalStep(StepBase):
    type: Literal["approval"] = "approval"
    prompt: str
    action: Literal["pause", "complete", "cancel"] = "pause"


class SubRunStep(StepBase):
    type: Literal["sub-run"] = "sub-run"
    manifest: AgentManifest | None = None
    manifest_ref: NonEmptyStr | None = None
    variable_mappings: dict[VariableKey, str] | None = None

    @model_validator(mode="after")
    def _has_agent(self) -> SubRunStep:
        if self.manifest is None and self.manifest_ref is None:
            raise rule_error("a sub-run step needs manifest or manifestRef")
        return self


class WebhookStep(StepBase):
    type: Literal["webhook"] = "webhook"
    url: Annotated[str, AfterValidator(_http_url)]
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] | None = None
    headers: dict[str, str] | None = None
    body: Any = None
    timeout_ms: PositiveInt | None = None
    retries: Annotated[int, Field(ge=0)] | None = None
    idempotency_key: str | None = None

    @field_validator("headers")
    @classmethod
    def _sendable_headers(cls, headers: dict[str, str] | None) -> dict[str, str] | None:
        for name, value in (headers or {}).items():
            problem = header_name_problem(name) or header_value_problem(value)
            if problem is not None:
                raise rule_error(problem, name)
        return headers

    @field_validator("idempotency_key")
    @classmethod
    def _sendable_key(cls, key: str | None) -> str | None:
        problem = None if key is None else header_value_problem(key)
        if problem is not None:
            raise rule_error(f"it is sent as the Idempotency-Key header: {problem}")
        return key

    @property
    def has_body(self) -> bool:
        """Whether a body was given: an explicit `body: null` sends JSON null."""
        return "body" in self.model_fields_set


class CodeStep(StepBase):
    type: Literal["code"] = "code"
    language: NonEmptyStr
    code: str
    timeout_ms: PositiveInt | None = None
    environment: dict[str, str] | None = None


BUILT_IN_STEPS: tuple[type[StepBase], ...] = (
    PromptStep, LoopStep, ApprovalStep, SubRunStep, WebhookStep, CodeStep)
for _model in BUILT_IN_STEPS:
    register_step_model(_model.model_fields["type"].default, _model)


# -- the agent manifest -----------------------------------------------------


class AgentManifest(SchemaModel):
    schema_version: Literal["1.0"]
    id: str | None = None
    name: str | None = None
    description: str | None = None
    model: ModelRef | None = None
    variables: list[VariableDeclaration] = Field(default_factory=list)
    connections: list[Connection] = Field(default_factory=list)
    steps: list[Step]
    limits: Limits | None = None
    metadata: JsonObject | None = None
    extensions: JsonObject | None = None

    @property
    def max_tool_calls_per_iteration(self) -> int:
        if self.limits is None:
            return DEFAULT_MAX_TOOL_CALLS_PER_ITERATION
        return self.limits.tool_calls_per_iteration

    def variable(self, key: str) -> VariableDeclaration | None:
        return next((v for v in self.variables if v.key == key), None)

    @model_validator(mode="after")
    def _unique_names(self) -> AgentManifest:
        keys: set[str] = set()
        for index, declaration in enumerate(self.variables):
            folded = declaration.key.casefold()
            if folded in keys:
                raise rule_error(
                    f"duplicate variable key {declaration.key!r} (keys are compared ignoring case)",
                    "variables", index, "key",
                )
            keys.add(folded)
        names: set[str] = set()
        for index, connection in enumerate(self.connections):
            alias = connection.effective_alias
            if alias in names:
                field = "alias" if connection.alias is not None else "ref"
                raise rule_error(f"duplicate connection alias {alias!r}",
                                 "connections", index, field)
            names.add(alias)
        _unique_step_ids(self.steps)
        problem = projection_problem(self.extensions)
        if problem is not None:
            raise rule_error(problem, "extensions", "agentRuntime", "stateProjection")
        declared = sum(1 for _ in iter_steps(self.steps))
        if self.limits is not None and self.limits.max_steps is not None \
                and declared > self.limits.max_steps:
            # As the reference: the steps written, loop children once each, not
            # the steps run (a loop's iterations are bounded by maxIterations).
            raise rule_error(f"the manifest declares {declared} steps (loop children "
                             f"included), more than its limit of {self.limits.max_steps}",
                             "limits", "maxSteps")
        return self


# `Step` and `AgentManifest` are forward references in LoopStep and SubRunStep:
# the models build lazily (SchemaModel's defer_build), once this module has
# defined every name they refer to.


def iter_steps(steps: Sequence[Step], prefix: str = "steps", *,
               into_sub_runs: bool = False) -> Iterator[tuple[str, Step]]:
    """Every step, depth first, with its field path (`steps[0].steps[1]`).

    A step's children (a loop's body, any kind's `child_steps`) run in the same
    run and are always visited; inline sub-run manifests are separate runs and
    are visited only with `into_sub_runs`.
    """
    for index, step in enumerate(steps):
        path = f"{prefix}[{index}]"
        yield path, step
        children = step.child_steps()
        if children:
            yield from iter_steps(children, f"{path}.{step.child_steps_field}",
                                  into_sub_runs=into_sub_runs)
        elif into_sub_runs and isinstance(step, SubRunStep) and step.manifest is not None:
            yield from iter_steps(step.manifest.steps, f"{path}.manifest.steps",
                                  into_sub_runs=True)


# -- parsing, loading, hashing ----------------------------------------------


def parse_agent_manifest(data: Any, *, source: str) -> AgentManifest:
    """Validate already-loaded data (a dict from YAML/JSON) as an agent manifest.

    Only the camelCase spelling of a file is accepted here: a snake_case key in
    a file is an unknown field, as in the reference implementation.
    """
    if isinstance(data, AgentManifest):
        return data
    check_structure(data, source=source)
    try:
        return AgentManifest.model_validate(data, by_name=False, context={FILE_SPELLING: True})
    except ValidationError as exc:
        raise manifest_error_from_validation(exc, source=source,
                                             more=duplicate_names(data)) from None


def manifest_json(manifest: AgentManifest) -> dict[str, Any]:
    """The manifest as the user wrote it, normalised by parsing: aliases, no defaults."""
    return manifest.model_dump(mode="json", by_alias=True, exclude_unset=True)


def manifest_hash(manifest: AgentManifest) -> str:
    """`sha256:<hex>` of the canonical JSON: sorted keys, no whitespace, UTF-8."""
    return "sha256:" + hashlib.sha256(canonical_json(manifest_json(manifest)).encode()).hexdigest()
