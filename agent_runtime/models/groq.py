"""The `groq` driver: models hosted by Groq through its OpenAI-compatible Chat
Completions endpoint (`pip install 'agent-runtime-durable[groq]'`).

Everything but the following is the `openai` driver's (`models/openai.py`):
- the key is `GROQ_API_KEY` (or the variable `apiKey: {env}` names), so an
  OpenAI key is never sent to Groq;
- the endpoint is Groq's own unless `baseURL` names another;
- structured output: only some hosted models take `response_format:
  json_schema`, so by default the schema is an instruction and the answer's
  text is parsed (`supportsStructuredOutputs: true` sends the schema);
- usage of a streamed answer comes in the last chunk's `x_groq.usage`, so no
  `stream_options` are sent (a standard `usage` is read too, if it comes).
"""

from __future__ import annotations

from typing import Any

from agent_runtime.config import RuntimeConfig
from agent_runtime.models.openai import OpenAIChatModel
from agent_runtime.models.provider_settings import ProviderSettings, provider_settings
from agent_runtime.models.retry import RetryPolicy

DEFAULT_KEY_ENV = "GROQ_API_KEY"
DEFAULT_BASE_URL = "https://api.groq.com/openai/v1"


def create_adapter(provider: str, config: RuntimeConfig, *,
                   retry: RetryPolicy | None = None) -> GroqChatModel:
    return GroqChatModel(provider_settings(provider, config, key_env=DEFAULT_KEY_ENV),
                         retry=retry)


class GroqChatModel(OpenAIChatModel):
    service = "the Groq API"
    default_base_url = DEFAULT_BASE_URL
    openai_environment = False
    structured_outputs_default = False

    def __init__(self, settings: ProviderSettings, *, retry: RetryPolicy | None = None) -> None:
        super().__init__(settings, retry=retry)
        self.include_usage = False  # Groq reports it in x_groq without being asked

    def _stream_usage(self, chunk: dict[str, Any]) -> Any:
        if chunk.get("usage") is not None:
            return chunk["usage"]
        extension = chunk.get("x_groq")
        return extension.get("usage") if isinstance(extension, dict) else None
