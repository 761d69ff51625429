"""The model a prompt step runs on, and what its profile's `capabilities` refuse.

`ResolvedModel` is a step's model once resolved (a profile, an explicit
provider/model, or a run's override).

As the reference's `validateModelCapabilities`: a profile whose model cannot
call tools (`tools: false`) is refused for a step with `tools`, one without
structured output (`structuredOutput: false`) for a step with an
`outputSchema`, and a step asking for more than the profile's
`maxOutputTokens`. We add `imageInput: false` for a step whose messages carry
an image. `streaming` chooses how the drivers call the model
(`agent_runtime.steps.prompt`).
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


def step_capabilities(step: PromptStep, manifest: AgentManifest, config: RuntimeConfig,
                      model_override: object) -> ModelCapabilities | None:
    """The capabilities of the profile `step` runs on; None without a profile (an explicit
    provider/model, or a run's `--model` override)."""
    ref = step.model or manifest.model
    if model_override or not isinstance(ref, ProfileModelRef):
        return None
    profile = config.models.get(ref.ref)
    return None if profile is None else profile.capabilities
