"""Model adapters: the scripted model and provider drivers, built from the runtime config.

`build_adapter(provider, config)` returns the adapter for a provider name: a
`providers` entry of the runtime config, or a built-in name (`openai`,
`anthropic`, `bedrock`, `google`/`gemini`, `xai`/`grok`, `groq`, `cohere`).
Each driver lives in its own module and is imported only when a run uses it,
so a provider SDK is needed only by those who use it; a missing one is named
with the extra that installs it.
"""

from __future__ import annotations

import importlib

from agent_runtime.config import RuntimeConfig
from agent_runtime.errors import StepFailed
from agent_runtime.excerpts import excerpt
from agent_runtime.models.base import ModelAdapter, ModelError, ModelRequest, ModelResponse

__all__ = ["ModelAdapter", "ModelError", "ModelRequest", "ModelResponse", "build_adapter"]

# driver -> its module, whose `create_adapter(provider name, config)` builds the adapter
DRIVER_MODULES = {
    "openai": "agent_runtime.models.openai",
    "openai-compatible": "agent_runtime.models.openai",
    "anthropic": "agent_runtime.models.anthropic",
    "bedrock": "agent_runtime.models.bedrock",
    "google": "agent_runtime.models.google",
    "xai": "agent_runtime.models.xai",
    "groq": "agent_runtime.models.groq",
    "cohere": "agent_runtime.models.cohere",
}
# driver -> the extra of this distribution (pyproject.toml) that installs its SDK
DRIVER_EXTRAS = {"openai": "openai", "openai-compatible": "openai", "anthropic": "anthropic",
                 "bedrock": "aws", "google": "google", "xai": "xai", "groq": "groq",
                 "cohere": "cohere"}
DISTRIBUTION = "agent-runtime-durable"


def build_adapter(provider: str, config: RuntimeConfig) -> ModelAdapter:
    driver = config.driver_of(provider)
    if driver is None:
        raise StepFailed("provider_unavailable",
                         f"unknown model provider {provider!r}; define it under `providers` in "
                         "the runtime config (--config) or run offline with "
                         "--model scripted/echo")
    module_name = DRIVER_MODULES.get(driver)
    if module_name is None:
        raise StepFailed("provider_unavailable",
                         f"model provider {provider!r} uses driver {driver!r}, which this "
                         "runtime does not support; supported: "
                         f"{', '.join(sorted(DRIVER_MODULES))}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        if (error.name or "").startswith("agent_runtime"):
            raise  # a bug of ours, not a missing SDK
        extra = f"'{DISTRIBUTION}[{DRIVER_EXTRAS[driver]}]'"
        if isinstance(error, ModuleNotFoundError):
            raise StepFailed("provider_unavailable",
                             f"model provider {provider!r} (driver {driver}) needs the package "
                             f"{error.name!r}, which is not installed: pip install "
                             f"{extra}") from error
        # Installed, but without what the driver imports: a version too old.
        raise StepFailed("provider_unavailable",
                         f"model provider {provider!r} (driver {driver}) cannot load its SDK "
                         f"({excerpt(str(error))}): pip install --upgrade {extra}") from error
    adapter: ModelAdapter = module.create_adapter(provider, config)
    return adapter
