"""The runtime config (`version: "1.0"`): providers, model profiles, connections, tools.

Format of the reference implementation's host config: `providers` name a
driver and where to reach it (credentials only as environment references),
`models` are named profiles a manifest selects with `model: {ref: NAME}`,
`connections` are the MCP servers the host allows and exactly which of their
tools (a manifest's `connections[]` may narrow that, never widen it).

We add `tools: {name: "module:function"}` for Python tools, the `stdio`
transport and `nonIdempotentTools` for MCP connections, and a `webhooks`
policy for webhook steps:

    connections:
      documents:
        driver: mcp
        transport: stdio              # or streamable-http (the default) with url
        command: python
        args: [-m, documents_server]
        env: {DOCS_TOKEN: {env: DOCS_TOKEN}}
        mode: read                    # read (the default) | read_write
        tools: [search, read, delete] # the complete allowlist
        readTools: [search, read]     # what `read` mode exposes
        nonIdempotentTools: [delete]  # repeating these is unsafe (effect-unknown)
        required: false
        connectTimeoutMs: 10000
        toolTimeoutMs: 30000
    webhooks:
      allowPrivateNetworks: false     # loopback, private, link-local and other
                                      # non-public addresses are refused unless true
      allowedHosts: [hooks.example.com, "*.example.org"]  # when set, the only hosts called
      maxResponseBytes: 1048576
    limits:                         # bounds on input (docs/limits.md); unknown keys refused
      manifestBytes: 2097152
      maxDepth: 64
    policy:                         # what any manifest of a run tree may do here
      scripted: echo                # (agent_runtime.policy; docs/threat-model.md)
      maxLoopIterations: 1000
    execution:
      maxConcurrency: 8             # the host's cap on a parallel wave's width (a run
                                    # manifest's execution.maxConcurrency asks, this caps)
    sandbox:                        # where code steps run (agent_runtime.sandbox.settings,
      adapter: bubblewrap           # docs/sandbox.md); without it validate refuses them

The config file itself is read up to `limits.CONFIG_BYTES` (1 MiB), as YAML
(libyaml, duplicate keys refused) or, for `.json`, JSON.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PositiveInt,
    Tag,
    ValidationError,
    field_validator,
)

from agent_runtime.errors import ConfigError, ConfigNotFound, ManifestError
from agent_runtime.execution_plan import DEFAULT_HOST_MAX_CONCURRENCY
from agent_runtime.limits import CONFIG_BYTES, InputLimits, decode_utf8, read_bounded
from agent_runtime.manifest_input import check_structure, parse_document
from agent_runtime.policy import HostPolicy
from agent_runtime.sandbox.settings import SandboxSettings

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


class SecretReference(_Strict):
    """A provider key in AWS Secrets Manager, or in an SSM SecureString when the name
    starts with '/' (`agent_runtime.secrets`); `field` picks one key of a JSON secret."""

    secret: str = Field(min_length=1, max_length=2048, pattern=r"^[A-Za-z0-9/_+=.@:!-]+$")
    field: str | None = Field(default=None, min_length=1)


def _key_reference_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return "secret" if "secret" in value else "env"
    if isinstance(value, (EnvReference, SecretReference)):
        return "secret" if isinstance(value, SecretReference) else "env"
    return None


# Where a provider key comes from: an environment variable or a secret, never
# the key itself. One union with one error, named by the field, for anything else.
KeyReference = Annotated[
    Annotated[EnvReference, Tag("env")] | Annotated[SecretReference, Tag("secret")],
    Discriminator(_key_reference_kind, custom_error_type="key_reference",
                  custom_error_message="must be {env: NAME} or {secret: NAME}, never the "
                  "key itself"),
]


class ProviderConfig(_Strict):
    driver: Literal["openai", "openai-compatible", "anthropic", "bedrock", "scripted",
                    "google", "xai", "groq", "cohere"]
    base_url: str | EnvReference | None = Field(default=None, alias="baseURL")
    api_key: KeyReference | None = Field(default=None, alias="apiKey")
    headers: dict[str, EnvReference] | None = None
    include_usage: bool | None = Field(default=None, alias="includeUsage")
    supports_structured_outputs: bool | None = Field(default=None,
                                                     alias="supportsStructuredOutputs")
    region: str | None = None


class ModelCapabilities(_Strict):
    """What a profile's model can do; each refuses the steps it cannot run
    (`agent_runtime.capabilities`), `streaming` picks how drivers call it,
    `reasoning: false` drops the reasoning a provider streams (it is neither
    shown nor counted in events), and `maxInputTokens` refuses, before the call,
    a request certainly larger than the model takes (`agent_runtime.capabilities`)."""

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


class McpAuth(_Strict):
    """How an HTTP connection authenticates: `none`, or `bearer` with a token from the
    environment. The reference's `oauth` and `client_credentials` are refused by
    name: this runtime has no token exchange to run them."""

    type: str
    token: EnvReference | None = None

    @field_validator("type")
    @classmethod
    def _supported(cls, value: str) -> str:
        if value in ("oauth", "client_credentials"):
            raise ValueError(f"{value} MCP auth is not supported by this runtime; use "
                             "bearer with token: {env: NAME}")
        if value not in ("none", "bearer"):
            raise ValueError(f"{value!r} is not an MCP auth type: use none or bearer")
        return value


class McpConnectionConfig(_Strict):
    """An MCP server the host allows, and which of its tools.

    `tools` is the complete allowlist; `readTools` is the subset the host
    classifies as read-only, the only tools a connection in `read` mode
    exposes. A server's own annotations are never used as authorisation. MCP
    tools receive the call's idempotency key, so they count as idempotent
    (re-called with the same key after a crash) unless listed in
    `nonIdempotentTools`.
    """

    driver: Literal["mcp"]
    transport: Literal["streamable-http", "stdio"] = "streamable-http"
    url: str | EnvReference | None = None
    auth: McpAuth | None = None
    bearer_token: EnvReference | None = Field(default=None, alias="bearerToken")
    headers: dict[str, EnvReference] | None = None
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str | EnvReference] | None = None
    cwd: str | None = None
    mode: Literal["read", "read_write"] = "read"
    tools: list[str] = Field(min_length=1)
    read_tools: list[str] = Field(default_factory=list, alias="readTools")
    non_idempotent_tools: list[str] = Field(default_factory=list, alias="nonIdempotentTools")
    required: bool = False
    connect_timeout_ms: PositiveInt = Field(default=10_000, alias="connectTimeoutMs")
    tool_timeout_ms: PositiveInt = Field(default=30_000, alias="toolTimeoutMs")


class WebhookPolicy(_Strict):
    """Where webhook steps may send requests.

    Destinations that resolve to a non-public address (loopback, private,
    link-local, shared, reserved) are refused unless `allowPrivateNetworks`;
    with `allowedHosts` set, only those hosts (`name`, or `*.domain` for its
    subdomains) are called at all. The two rules are independent.
    """

    allow_private_networks: bool = Field(default=False, alias="allowPrivateNetworks")
    allowed_hosts: list[str] | None = Field(default=None, alias="allowedHosts")
    max_response_bytes: PositiveInt = Field(default=1024 * 1024, alias="maxResponseBytes")


class ExecutionPolicy(_Strict):
    """How wide a parallel run's waves may be on this host, whatever a run asks for."""

    max_concurrency: int = Field(default=DEFAULT_HOST_MAX_CONCURRENCY, ge=1, le=64,
                                 alias="maxConcurrency")


class RuntimeConfig(_Strict):
    version: Literal["1.0"]
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    models: dict[str, ModelProfile] = Field(default_factory=dict)
    connections: dict[str, McpConnectionConfig] = Field(default_factory=dict)
    tools: dict[str, str] = Field(default_factory=dict)
    webhooks: WebhookPolicy = Field(default_factory=WebhookPolicy)
    limits: InputLimits = Field(default_factory=InputLimits)
    execution: ExecutionPolicy = Field(default_factory=ExecutionPolicy)
    # What tenants' manifests may make this host do (agent_runtime.policy); None:
    # serve and the API Lambda apply HostPolicy()'s safe defaults, the CLI none.
    policy: HostPolicy | None = None
    # Where `code` steps run (agent_runtime.sandbox; docs/sandbox.md); None: nowhere,
    # and validate refuses a manifest with one.
    sandbox: SandboxSettings | None = None
    # Where the CLI keeps runs when no flag or AGENT_RUNTIME_STORE says:
    # `DRIVER:LOCATION`, e.g. `sqlite:./runs.sqlite` (the CLI's store selection).
    store: str | None = None

    @field_validator("store")
    @classmethod
    def _store(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from stores.drivers import driver_names  # noqa: PLC0415 - a metadata scan, when used

        driver, separator, location = value.partition(":")
        names = driver_names()
        if not (driver == "memory" or (driver in names and separator and location)):
            raise ValueError(f"must be DRIVER:LOCATION with DRIVER one of {', '.join(names)}, "
                             "e.g. sqlite:./runs.sqlite")
        return value

    @field_validator("providers", "models", "connections")
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


# Provider fields that only some drivers apply: refused on the others rather than ignored.
# (field, attribute, the drivers that use it)
_DRIVER_ONLY: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("includeUsage", "include_usage", ("openai", "openai-compatible")),
    ("region", "region", ("bedrock",)),
)


def parse_config(data: Any, *, source: str) -> RuntimeConfig:
    if not isinstance(data, dict):
        raise ConfigError("a runtime config is a mapping with `version: \"1.0\"`", source=source)
    try:
        config = RuntimeConfig.model_validate(data)
    except ValidationError as error:
        problems = [("unknown field" if problem["type"] == "extra_forbidden"
                     else problem["msg"].removeprefix("Value error, "), _path_of(problem["loc"]))
                    for problem in error.errors()]
        reason, field = problems[0]
        if len(problems) > 1:
            reason += " (also: " + "; ".join(f"{at}: {why}" for why, at in problems[1:]) + ")"
        raise ConfigError(reason, source=source, field=field) from error
    for name, profile in config.models.items():
        if config.driver_of(profile.provider) is None:
            raise ConfigError(f"model profile {name!r} names unknown provider "
                              f"{profile.provider!r}", source=source,
                              field=f"models.{name}.provider")
    for name, provider in config.providers.items():
        if provider.driver == "openai-compatible" and provider.base_url is None:
            raise ConfigError("an openai-compatible provider needs baseURL", source=source,
                              field=f"providers.{name}.baseURL")
        if isinstance(provider.base_url, str) and url_has_credentials(provider.base_url):
            raise ConfigError("give the endpoint without URL credentials (user:password@); "
                              "send them with apiKey or headers as env references",
                              source=source, field=f"providers.{name}.baseURL")
        for field, attribute, drivers in _DRIVER_ONLY:
            if getattr(provider, attribute) is not None and provider.driver not in drivers:
                raise ConfigError(f"only the {' and '.join(drivers)} driver uses {field}; "
                                  f"the {provider.driver} driver would ignore it: remove it",
                                  source=source, field=f"providers.{name}.{field}")
    for name, connection in config.connections.items():
        _check_connection(connection, source=source, at=f"connections.{name}")
    for name, target in config.tools.items():
        if ":" not in target:
            raise ConfigError("a tool is named as \"module:function\"", source=source,
                              field=f"tools.{name}")
    return config


def url_has_credentials(url: str) -> bool:
    """Whether `url` embeds a user or password (`https://user:secret@host/`): a
    credential written into a file, and logged wherever the URL is."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return False
    return parts.username is not None or parts.password is not None


def _check_connection(connection: McpConnectionConfig, *, source: str, at: str) -> None:
    """The rules across a connection's fields (the reference's, plus the transports')."""
    def refuse(reason: str, field: str) -> ConfigError:
        return ConfigError(reason, source=source, field=f"{at}.{field}")

    if connection.transport == "stdio":
        if connection.command is None:
            raise refuse("a stdio connection needs command", "command")
        http_only: tuple[tuple[str, object], ...] = (
            ("url", connection.url), ("auth", connection.auth),
            ("bearerToken", connection.bearer_token), ("headers", connection.headers))
        for field, value in http_only:
            if value is not None:
                raise refuse("only for streamable-http connections (stdio has command, args, "
                             "env)", field)
    else:
        if connection.url is None:
            raise refuse("a streamable-http connection needs url", "url")
        stdio_only: tuple[tuple[str, object], ...] = (
            ("command", connection.command), ("env", connection.env), ("cwd", connection.cwd))
        for field, value in stdio_only:
            if value is not None:
                raise refuse("only for stdio connections", field)
        if connection.args:
            raise refuse("only for stdio connections", "args")
    auth = connection.auth
    if auth is not None and (auth.type == "bearer") != (auth.token is not None):
        raise refuse("bearer auth needs token (an env reference); none takes no token",
                      "auth.token")
    if auth is not None and connection.bearer_token is not None:
        raise refuse("set auth or bearerToken, not both", "auth")
    if (auth is not None or connection.bearer_token is not None) and any(
            header.lower() == "authorization" for header in connection.headers or {}):
        raise refuse("cannot set both auth and an Authorization header", "headers")
    allowed = set(connection.tools)
    for field, names in (("readTools", connection.read_tools),
                         ("nonIdempotentTools", connection.non_idempotent_tools)):
        for index, name in enumerate(names):
            if name not in allowed:
                raise refuse(f"tool {name!r} is not in tools", f"{field}[{index}]")
    if connection.mode == "read" and not connection.read_tools:
        raise refuse("a read-mode connection needs an explicit readTools allowlist", "readTools")


def load_config(path: str | Path) -> RuntimeConfig:
    """The runtime config file at `path`; every problem is a `ConfigError` naming it
    (`ConfigNotFound` when there is no such file)."""
    source = str(path)
    raw = read_bounded(path, CONFIG_BYTES, what="runtime config", error=ConfigError,
                       missing=ConfigNotFound)
    text = decode_utf8(raw, source=source, error=ConfigError)
    data = parse_document(text, source=source, json_format=source.endswith(".json"),
                          limit=CONFIG_BYTES, error=ConfigError)
    try:
        check_structure(data, source=source)
    except ManifestError as error:
        raise ConfigError(error.reason, source=source, field=error.field) from None
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
