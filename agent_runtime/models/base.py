"""The seam between the engine and model providers.

A model adapter turns a `ModelRequest` into a `ModelResponse`. Messages use
the transcript's content parts (`text`, `json`, `tool-call`, `tool-result`),
so a checkpointed conversation can be replayed to any adapter unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent_runtime.errors import AgentRuntimeError


@dataclass(frozen=True)
class Usage:
    """Token counts a provider reported for one response."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None

    def tokens(self) -> int | None:
        """Consumed tokens: the reported total, else input + output, else None."""
        if self.total_tokens is not None:
            return self.total_tokens
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    def as_json(self) -> dict[str, int]:
        values = {"inputTokens": self.input_tokens, "outputTokens": self.output_tokens,
                  "totalTokens": self.total_tokens}
        return {key: value for key, value in values.items() if value is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Usage | None:
        if data is None:
            return None
        return cls(input_tokens=data.get("inputTokens"), output_tokens=data.get("outputTokens"),
                   total_tokens=data.get("totalTokens"))


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCallRequest:
    call_id: str
    name: str
    arguments: dict[str, Any]


TextListener = Callable[[str], None]


@dataclass
class ModelRequest:
    provider: str
    model: str
    messages: list[dict[str, Any]]
    options: dict[str, Any] = field(default_factory=dict)
    tools: list[ToolSpec] = field(default_factory=list)
    output_schema: dict[str, Any] | None = None
    max_output_tokens: int | None = None
    timeout_seconds: float | None = None
    # Stream the answer: text deltas reach `on_text` as they arrive. Without it a
    # driver makes one plain request and passes the whole text to `on_text` once.
    stream: bool = False
    run_id: str = ""
    step_id: str = ""
    step_path: str = ""
    # 1-based: the n-th model request of the run / of this step id, counted
    # from the run's saved state so a resumed run continues, never restarts.
    request_index: int = 1
    step_request_index: int = 1
    # Reasoning deltas, when the provider streams them and the run shows or counts
    # them (None: the driver drops reasoning). Not the answer: never retried on.
    on_reasoning: TextListener | None = field(default=None, compare=False, repr=False)


@dataclass
class ModelResponse:
    text: str | None = None
    # Structured output for an `outputSchema` step, when the provider returns it parsed.
    data: Any = None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str = "stop"
    model: str | None = None



class ModelAdapter(Protocol):
    """A provider driver. `on_text` receives text deltas as they arrive, when streaming."""

    async def generate(self, request: ModelRequest, *,
                       on_text: TextListener | None = None) -> ModelResponse:
        ...


class ModelError(AgentRuntimeError):
    """A provider call failed in a way the run should report (not a crash of ours).

    `code` is the provider's error type or code (else `http_<status>`, `timeout`,
    `connection_error`); `retryable` says the same request may succeed later,
    and `retry_after` is how long the provider asked to wait first, in seconds.
    """

    def __init__(self, code: str, message: str, *, retryable: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable
        self.retry_after = retry_after
