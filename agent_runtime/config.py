"""The runtime config (`version: "1.0"`): providers, model profiles, tools.

Format of the reference implementation's host config: `providers` name a
driver and where to reach it (credentials only as environment references),
`models` are named profiles a manifest selects with `model: {ref: NAME}`.
We add `tools: {name: "module:function"}` for Python tools.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent_runtime.errors import ConfigError

DRIVERS = ("openai", "openai-compatible", "anthropic", "bedrock", "scripted",
           "google", "xai", "groq", "cohere")
# Provider names that need no `providers` entry: they mean their own driver.
BUILT_IN_PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "bedrock": "bedrock",
                      "scripted": "scripted", "google": "google", "gemini": "google",
                      "xai": "xai", "grok": "xai", "groq": "groq", "cohere": "cohere"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class EnvReference(_Strict):
    env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    def resolve(self) -> str | None:
        return os.environ.get(self.env)


class ProviderConfig(_Strict):
    driver: Literal["openai", "openai-compatible", "anthropic", "bedrock", "scripted",
                    "google", "xai", "groq", "cohere"]
    base_url: str | EnvReference | None = Field(default=None, alias="baseURL")
    api_key: EnvReference | None = Field(default=None, alias="apiKey")
    headers: dict[str, EnvReference] | None = None
    include_usage: bool | None = Field(default=None, alias="includeUsage")
    supports_structured_outputs: bool | None = Field(default=None,
                                                     alias="supportsStructuredOutputs")
    region: str | None = None


class ModelCapabilities(_Strict):
    streaming: bool | None = None
    tools: bool | None = None
    structured_output: bool | None = Field(default=None, alias="structuredOutput")
    reasoning: bool | None = None
    image_input: bool | None = Field(default=None, alias="imageInput")
    max_input_tokens: int | None = Field(default=None, alias="maxInputTokens", gt=0)
    max_output_tokens: int | None = Field(default=None, alias="maxOutputTokens", gt=0)


class ModelProfile(_Strict):
    provider: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    model: str = Field(min_length=1)
    options: dict[str, Any] | None = None
    capabilities: ModelCapabilities | None = None


class RuntimeConfig(_Strict):
    version: Literal["1.0"]
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    models: dict[str, ModelProfile] = Field(default_factory=dict)
    connections: dict[str, dict[str, Any]] = Field(default_factory=dict)
    tools: dict[str, str] = Field(default_factory=dict)

    @field_validator("providers", "models")
    @classmethod
    def _names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not name or not name[0].isalpha() or not name.replace("-", "").isalnum() \
                    or name.lower() != name:
                raise ValueError(f"name {name!r} must match ^[a-z][a-z0-9-]*$")
        return value

    def driver_of(self, provider: str) -> str | None:
        if provider in self.providers:
            return self.providers[provider].driver
        return BUILT_IN_PROVIDERS.get(provider)


def _path_of(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def parse_config(data: Any, *, source: str) -> RuntimeConfig:
    if not isinstance(data, dict):
        raise ConfigError("a runtime config is a mapping with `version: \"1.0\"`", source=source)
    try:
        config = RuntimeConfig.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        reason = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        raise ConfigError(reason, source=source, field=_path_of(first["loc"])) from error
    for name, profile in config.models.items():
        if config.driver_of(profile.provider) is None:
            raise ConfigError(f"model profile {name!r} names unknown provider "
                              f"{profile.provider!r}", source=source,
                              field=f"models.{name}.provider")
    for name, provider in config.providers.items():
        if provider.driver == "openai-compatible" and provider.base_url is None:
            raise ConfigError("an openai-compatible provider needs baseURL", source=source,
                              field=f"providers.{name}.baseURL")
    for name, target in config.tools.items():
        if ":" not in target:
            raise ConfigError("a tool is named as \"module:function\"", source=source,
                              field=f"tools.{name}")
    return config


def load_config(path: str | Path) -> RuntimeConfig:
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise ConfigError("config file not found", source=source) from error
    try:
        data = json.loads(text) if source.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise ConfigError(f"malformed config: {error}", source=source) from error
    return parse_config(data, source=source)


def empty_config() -> RuntimeConfig:
    return RuntimeConfig(version="1.0")


def import_tool_target(target: str, *, source: str, name: str) -> Any:
    """The object a `tools` entry names (`package.module:function`)."""
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"cannot import {target!r}: {error}", source=source,
                          field=f"tools.{name}") from error
