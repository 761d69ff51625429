"""Model adapters: the scripted model and provider drivers, built from the runtime config.

`build_adapter(provider, config)` returns the adapter for a provider name: a
`providers` entry of the runtime config, or a built-in name (`openai`,
`anthropic`, `bedrock`). Each driver lives in its own module and is imported
only when a run uses it, so a provider SDK is needed only by those who use it.
"""

from __future__ import annotations

import importlib

from agent_runtime.config import RuntimeConfig
from agent_runtime.errors import StepFailed
from agent_runtime.models.base import ModelAdapter, ModelError, ModelRequest, ModelResponse

__all__ = ["ModelAdapter", "ModelError", "ModelRequest", "ModelResponse", "build_adapter"]

# driver -> (module, factory function taking (provider name, config))
DRIVER_MODULES = {
    "openai": "agent_runtime.models.openai",
    "openai-compatible": "agent_runtime.models.openai",
    "anthropic": "agent_runtime.models.anthropic",
    "bedrock": "agent_runtime.models.bedrock",
}


# The extra of this distribution that installs each driver's SDK.
DRIVER_EXTRAS = {"openai": "openai", "openai-compatible": "openai", "anthropic": "anthropic",
                 "bedrock": "aws"}


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
        extra = DRIVER_EXTRAS.get(driver)
        install = f": pip install 'agent-runtime-durable[{extra}]'" if extra else ""
        raise StepFailed("provider_unavailable",
                         f"model provider {provider!r} (driver {driver}) needs a package that "
                         f"is not installed ({error.name or error}){install}") from error
    adapter: ModelAdapter = module.create_adapter(provider, config)
    return adapter
