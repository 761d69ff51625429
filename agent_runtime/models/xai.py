"""The `xai` driver (provider names `xai` and `grok`): xAI's Grok models through
their OpenAI-compatible Chat Completions endpoint
(`pip install 'agent-runtime-durable[xai]'`).

Everything but the following is the `openai` driver's (`models/openai.py`):
- the key is `XAI_API_KEY` (or the variable `apiKey: {env}` names), so an
  OpenAI key is never sent to xAI;
- the endpoint is xAI's own unless `baseURL` names another;
- structured output is `response_format: json_schema`, which every Grok
  language model takes (`supportsStructuredOutputs: false` turns it off);
- usage of a streamed answer comes in its last chunk (`include_usage`).
"""

from __future__ import annotations

from agent_runtime.config import RuntimeConfig
from agent_runtime.models.openai import OpenAIChatModel
from agent_runtime.models.provider_settings import provider_settings
from agent_runtime.models.retry import RetryPolicy

DEFAULT_KEY_ENV = "XAI_API_KEY"
DEFAULT_BASE_URL = "https://api.x.ai/v1"


def create_adapter(provider: str, config: RuntimeConfig, *,
                   retry: RetryPolicy | None = None) -> XaiChatModel:
    return XaiChatModel(provider_settings(provider, config, key_env=DEFAULT_KEY_ENV),
                        retry=retry)


class XaiChatModel(OpenAIChatModel):
    service = "the xAI API"
    default_base_url = DEFAULT_BASE_URL
    openai_environment = False
