"""Prompt message history of schema 1.0: `PromptMessage` and its content parts.

A prompt step may give a complete, ordered model history (`messages[]`)
instead of the `prompt`/`systemPrompt` shorthand. These models validate that
history when the manifest is parsed, so a provider never receives a history it
would reject halfway through a run: system messages carry only text and come
first, tool messages carry only tool results, and every historical tool call
is answered exactly once by a result with the same name.

Rule errors name the offending sub-path (`rule_error(reason, "content", 1)`), so
the user sees `steps[0].messages[1].content[1]`, not just the message.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, NonNegativeInt, model_validator

from agent_runtime.manifest_input import JsonObject, NonEmptyStr, SchemaModel, rule_error

Role = Literal["system", "user", "assistant", "tool"]


class MessageArtifact(SchemaModel):
    """A durable reference to media kept in an artifact store."""

    id: NonEmptyStr
    name: NonEmptyStr
    media_type: NonEmptyStr
    uri: str | None = None
    size: NonNegativeInt | None = None
    sha256: str | None = None
    metadata: JsonObject | None = None


class ToolCall(SchemaModel):
    id: NonEmptyStr
    name: NonEmptyStr
    input: JsonObject
    step_id: str | None = None
    provider_executed: bool | None = None
    metadata: JsonObject | None = None


class ToolResultError(SchemaModel):
    code: NonEmptyStr
    message: str
    retryable: bool | None = None
    details: JsonObject | None = None
    stack: str | None = None


class ToolResult(SchemaModel):
    call_id: NonEmptyStr
    name: NonEmptyStr
    output: Any = None
    error: ToolResultError | None = None
    artifacts: list[MessageArtifact] | None = None
    metadata: JsonObject | None = None


class _Part(SchemaModel):
    metadata: JsonObject | None = None
    provider_options: JsonObject | None = None

    def model_post_init(self, context: Any, /) -> None:
        # The `type` tag has a default for Python callers, but it must always be
        # dumped: without it a dumped history could not be parsed back.
        self.__pydantic_fields_set__.add("type")


class TextPart(_Part):
    type: Literal["text"] = "text"
    text: str


class ReasoningPart(_Part):
    type: Literal["reasoning"] = "reasoning"
    text: str | None = None
    encrypted: str | None = None


class JsonPart(_Part):
    type: Literal["json"] = "json"
    value: Any


class _MediaPart(_Part):
    artifact: MessageArtifact | None = None
    url: NonEmptyStr | None = None
    data: NonEmptyStr | None = None  # base64; artifacts are preferred in durable histories
    media_type: NonEmptyStr | None = None

    @model_validator(mode="after")
    def _one_source(self) -> _MediaPart:
        sources = [s for s in (self.artifact, self.url, self.data) if s is not None]
        if len(sources) != 1:
            raise rule_error("a media part needs exactly one of artifact, url or data")
        return self


class ImagePart(_MediaPart):
    type: Literal["image"] = "image"


class FilePart(_MediaPart):
    type: Literal["file"] = "file"
    name: NonEmptyStr | None = None

    @model_validator(mode="after")
    def _media_type_known(self) -> FilePart:
        # An artifact carries its own media type; inline data or a URL does not.
        if self.artifact is None and self.media_type is None:
            raise rule_error("required for a file part without an artifact", "mediaType")
        return self


class ToolCallPart(_Part):
    type: Literal["tool-call"] = "tool-call"
    call: ToolCall


class ToolResultPart(_Part):
    type: Literal["tool-result"] = "tool-result"
    result: ToolResult


ContentPart = Annotated[
    TextPart | ReasoningPart | JsonPart | ImagePart | FilePart | ToolCallPart | ToolResultPart,
    Field(discriminator="type"),
]

# Which part types each role may carry; anything else is rejected by name.
_ALLOWED_PARTS: dict[str, frozenset[str]] = {
    "system": frozenset({"text"}),
    "tool": frozenset({"tool-result"}),
    "user": frozenset({"text", "json", "image", "file"}),
    "assistant": frozenset(
        {"text", "reasoning", "json", "image", "file", "tool-call", "tool-result"}),
}


class PromptMessage(SchemaModel):
    role: Role
    content: Annotated[list[ContentPart], Field(min_length=1)]
    metadata: JsonObject | None = None
    provider_options: JsonObject | None = None

    @model_validator(mode="after")
    def _parts_fit_role(self) -> PromptMessage:
        allowed = _ALLOWED_PARTS[self.role]
        for index, part in enumerate(self.content):
            if part.type not in allowed:
                raise rule_error(
                    f"a {self.role} message cannot contain a {part.type} part "
                    f"(allowed: {', '.join(sorted(allowed))})",
                    "content",
                    index,
                )
        return self


def history_problem(messages: list[PromptMessage]) -> tuple[str, tuple[str | int, ...]] | None:
    """The first ordering or pairing problem of a message history, with its sub-path.

    System messages must precede the rest; every tool call id is unique and is
    answered by exactly one later tool result naming the same tool.
    """
    calls: dict[str, tuple[str, int]] = {}
    answered: set[str] = set()
    seen_other_role = False
    for m_index, message in enumerate(messages):
        if message.role == "system" and seen_other_role:
            return ("system messages must come before user, assistant and tool messages",
                    (m_index, "role"))
        seen_other_role = seen_other_role or message.role != "system"
        for p_index, part in enumerate(message.content):
            at = (m_index, "content", p_index)
            if isinstance(part, ToolCallPart):
                if part.call.id in calls:
                    return f"duplicate tool call id {part.call.id!r}", at
                calls[part.call.id] = (part.call.name, m_index)
            elif isinstance(part, ToolResultPart):
                call_id = part.result.call_id
                if call_id not in calls:
                    return f"tool result {call_id!r} has no earlier tool call", at
                name = calls[call_id][0]
                if part.result.name != name:
                    return (f"tool result {call_id!r} names {part.result.name!r}; "
                            f"the call named {name!r}"), at
                if call_id in answered:
                    return f"duplicate tool result for call {call_id!r}", at
                answered.add(call_id)
    for call_id, (_, m_index) in calls.items():
        if call_id not in answered:
            return f"tool call {call_id!r} has no tool result", (m_index,)
    return None
