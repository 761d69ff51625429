"""Step kinds: the fields every step has, and the models of the kinds a manifest may use.

A step kind is a pydantic model, a `StepBase` subclass whose `type` is
`Literal["kind"]`, registered here under its kind. A manifest's `steps` lists
(the top level and every loop's) validate each entry with the model its `type`
names, looked up when the manifest is parsed, so a kind registered by a host
(`agent_runtime.steps.register_step_kind`, which registers its executor with
it) parses, hashes and reports errors like a built-in one. The built-in
models register themselves in `agent_runtime.manifest`.

This module knows models only: executors live in `agent_runtime.steps`, so
reading a manifest never loads the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, ClassVar, Literal, get_args, get_origin

from pydantic import PlainValidator, SerializeAsAny, ValidationInfo, field_validator
from pydantic_core import PydanticKnownError

from agent_runtime.conditions import compile_condition
from agent_runtime.errors import ConditionSyntaxError
from agent_runtime.manifest_input import JsonObject, NonEmptyStr, SchemaModel, rule_error
from agent_runtime.variables import VariableKey

# Validation context saying the data is a manifest as a file spells it:
# camelCase only, a snake_case key is an unknown field (as in the reference).
FILE_SPELLING = "manifest_file_spelling"


def check_condition(expression: str | None) -> str | None:
    """Conditions are compiled at parse time so a typo fails before the run starts."""
    if expression is not None:
        try:
            compile_condition(expression)
        except ConditionSyntaxError as exc:
            raise rule_error(f"unparsable condition: {exc.reason}") from exc
    return expression


class StepBase(SchemaModel):
    """The fields of every step; a step kind's model adds `type: Literal[kind]` and its own."""

    type: str
    id: NonEmptyStr
    name: NonEmptyStr | None = None
    description: str | None = None
    when: str | None = None
    output_variable: VariableKey | None = None
    include_in_final_output: bool = False
    metadata: JsonObject | None = None
    extensions: JsonObject | None = None

    # The field holding the steps this step runs in the same run, in order (a
    # loop's body, a group's members), or None. The engine goes down into them
    # on resume (the checkpoint cursor's frames), `iter_steps` visits them (and
    # so `maxSteps` counts them), and nothing else needs to know the kind.
    child_steps_field: ClassVar[str | None] = None
    # The shape of the continuation this kind keeps in its frame. Bump it when
    # the shape changes, and override `migrate_continuation` to bring a frame
    # saved by an earlier release up to it: the engine calls it on resume
    # (agent_runtime/continuations.py) and refuses a frame from a later release.
    continuation_version: ClassVar[int] = 1

    _check_when = field_validator("when")(check_condition)

    def child_steps(self) -> Sequence[StepBase]:
        """The steps this step runs in the same run (`child_steps_field`); none by default."""
        if self.child_steps_field is None:
            return ()
        children: Sequence[StepBase] = getattr(self, self.child_steps_field)
        return children

    @classmethod
    def migrate_continuation(cls, continuation: JsonObject, version: int) -> JsonObject:
        """`continuation`, saved at `version` (older than `continuation_version`), in
        the current shape. A kind that bumps its version overrides this; left as
        it is, a frame of an older version cannot be resumed, and says so."""
        raise NotImplementedError(
            f"{cls.__name__} cannot migrate a continuation from version {version} "
            f"to {cls.continuation_version}")

    def model_post_init(self, context: object, /) -> None:
        # `type` has a default for Python callers but is always dumped, so
        # `manifest_json` output can be parsed back by its kind.
        self.__pydantic_fields_set__.add("type")


_MODELS: dict[str, type[StepBase]] = {}


class StepKindError(ValueError):
    """A step kind that cannot be registered: the reason names the kind and the model."""


def _declared_kind(model: type[StepBase]) -> str | None:
    field = model.model_fields.get("type")
    if field is None or get_origin(field.annotation) is not Literal:
        return None
    values = get_args(field.annotation)
    return values[0] if len(values) == 1 and isinstance(values[0], str) else None


def register_step_model(kind: str, model: type[StepBase], *, replace: bool = False) -> None:
    """Let manifests use steps of `kind`, validated with `model`.

    `model` must be a `StepBase` subclass declaring `type: Literal[kind]`
    (with the default `kind`, for Python callers). A kind already registered
    is refused unless `replace`, so a host cannot shadow a built-in by accident.
    """
    if not isinstance(model, type) or not issubclass(model, StepBase):
        raise StepKindError(f"step kind {kind!r}: {model!r} is not a StepBase subclass")
    declared = _declared_kind(model)
    if declared != kind:
        raise StepKindError(f"step kind {kind!r}: {model.__name__}.type must be "
                            f"Literal[{kind!r}] = {kind!r}, got {declared!r}")
    version = model.continuation_version
    if type(version) is not int or version < 1:
        # Checked once here, not in every frame the engine builds at a commit point.
        raise StepKindError(f"step kind {kind!r}: {model.__name__}.continuation_version "
                            f"must be an integer of at least 1, got {version!r}")
    if kind in _MODELS and not replace and _MODELS[kind] is not model:
        raise StepKindError(f"step kind {kind!r} is already registered "
                            f"({_MODELS[kind].__name__}); pass replace=True to replace it")
    _MODELS[kind] = model


def unregister_step_model(kind: str) -> None:
    """Forget `kind` (a host's kind, or a test's); manifests using it no longer parse."""
    _MODELS.pop(kind, None)


def step_model(kind: str) -> type[StepBase] | None:
    return _MODELS.get(kind)


def step_kinds() -> tuple[str, ...]:
    """The kinds a manifest may use, in registration order (the built-ins first)."""
    return tuple(_MODELS)


def _validate_step(value: object, info: ValidationInfo) -> StepBase:
    """One entry of a `steps` list, validated with its kind's model.

    The errors are pydantic's own (`union_tag_*` for a missing or unknown
    `type`, the model's errors located inside the step), so they are reported
    like every other manifest error (`agent_runtime.manifest_input`).
    """
    if isinstance(value, StepBase):  # a model built in Python
        if _MODELS.get(value.type) is type(value):
            return value
        raise _unknown_kind(value.type)
    if not isinstance(value, dict):
        raise PydanticKnownError("model_type", {"class_name": "a step"})
    kind = value.get("type")
    if kind is None:
        raise PydanticKnownError("union_tag_not_found", {"discriminator": "'type'"})
    model = _MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise _unknown_kind(kind)
    context = info.context or {}
    return model.model_validate(value, context=context,
                                by_name=False if context.get(FILE_SPELLING) else None)


def _unknown_kind(kind: object) -> PydanticKnownError:
    allowed = ", ".join(repr(known) for known in _MODELS)
    return PydanticKnownError("union_tag_invalid", {
        "discriminator": "'type'", "tag": kind if isinstance(kind, str) else repr(kind),
        "expected_tags": allowed})


# A step of any registered kind. Serialised as its own model (SerializeAsAny),
# so dumping a manifest keeps every kind's fields.
Step = Annotated[SerializeAsAny[StepBase], PlainValidator(_validate_step)]

__all__ = ["FILE_SPELLING", "Step", "StepBase", "StepKindError", "check_condition",
           "register_step_model", "step_kinds", "step_model", "unregister_step_model"]
