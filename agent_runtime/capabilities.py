"""The model a prompt step runs on, and what its profile's `capabilities` refuse.

`ResolvedModel` is a step's model once resolved (a profile, an explicit
provider/model, or a run's override).

As the reference's `validateModelCapabilities`: a profile whose model cannot
call tools (`tools: false`) is refused for a step with `tools`, one without
structured output (`structuredOutput: false`) for a step with an
`outputSchema`, and a step asking for more than the profile's
`maxOutputTokens`. We add `imageInput: false` for a step whose messages carry
an image. `streaming` chooses how the drivers call the model
(`agent_runtime.steps.prompt`), and `reasoning: false` drops the reasoning a
provider streams.

`maxInputTokens` is checked on each request, before it is sent: no tokenizer
is bundled, so a request is refused only when it is certainly too large, its
messages and tool definitions holding more than `BYTES_PER_TOKEN_AT_MOST`
bytes of JSON per allowed token (text and code average well under that with
the tokenizers in use). A paid call the provider would refuse for its context
length fails the step here instead, naming the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent_runtime.config import ModelCapabilities, RuntimeConfig
from agent_runtime.manifest import AgentManifest, ProfileModelRef, PromptStep
from agent_runtime.models.base import ModelAdapter


@dataclass(frozen=True)
class ResolvedModel:
    adapter: ModelAdapter
    provider: str
    model: str
    options: dict[str, Any]
    # The profile's `capabilities.streaming`; None when it does not say.
    streaming: bool | None = None
    # The profile's `capabilities.reasoning` (False: drop streamed reasoning) and
    # `capabilities.maxInputTokens`; None when it does not say.
    reasoning: bool | None = None
    max_input_tokens: int | None = None


def capability_problem(step: PromptStep,
                       capabilities: ModelCapabilities | None) -> tuple[str, str] | None:
    """(field of the step, reason) when the profile's model cannot run `step`, else None."""
    if capabilities is None:
        return None
    if step.tools and capabilities.tools is False:
        return "tools", "the step's model profile does not support tools (capabilities.tools)"
    if step.output_schema is not None and capabilities.structured_output is False:
        return ("outputSchema", "the step's model profile does not support structured output "
                "(capabilities.structuredOutput)")
    limit = capabilities.max_output_tokens
    if step.max_output_tokens is not None and limit is not None and step.max_output_tokens > limit:
        return ("maxOutputTokens", f"{step.max_output_tokens} output tokens exceed the model "
                f"profile's limit of {limit} (capabilities.maxOutputTokens)")
    if capabilities.image_input is False and any(
            part.type == "image" for message in step.messages or [] for part in message.content):
        return "messages", "the step's model profile does not take images (capabilities.imageInput)"
    return None


BYTES_PER_TOKEN_AT_MOST = 8


def input_too_large(request_bytes: int, max_input_tokens: int | None) -> str | None:
    """Why a request of `request_bytes` (its messages and tools as JSON) is certainly
    more than `max_input_tokens`, else None."""
    if max_input_tokens is None or request_bytes <= max_input_tokens * BYTES_PER_TOKEN_AT_MOST:
        return None
    return (f"the request's messages and tools are {request_bytes} bytes, more than "
            f"{BYTES_PER_TOKEN_AT_MOST} bytes for each of the model profile's "
            f"{max_input_tokens} input tokens (capabilities.maxInputTokens)")


def step_capabilities(step: PromptStep, manifest: AgentManifest, config: RuntimeConfig,
                      model_override: object) -> ModelCapabilities | None:
    """The capabilities of the profile `step` runs on; None without a profile (an explicit
    provider/model, or a run's `--model` override)."""
    ref = step.model or manifest.model
    if model_override or not isinstance(ref, ProfileModelRef):
        return None
    profile = config.models.get(ref.ref)
    return None if profile is None else profile.capabilities
