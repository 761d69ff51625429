"""A provider's settings as a driver needs them: the config entry with its
environment references resolved.

Credentials come from the environment: the variable a `providers` entry
names (`apiKey: {env: NAME}`), else the driver's conventional one
(`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`); or from AWS, a Secrets Manager
secret or SSM SecureString the entry names (`apiKey: {secret: NAME}`,
`agent_runtime.secrets`), which is how keys reach the Lambda functions. A
key that is needed but unset fails when the adapter is built (before a run is
created, or before its first request) with a message naming the provider and
the variable or secret.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from agent_runtime.config import EnvReference, RuntimeConfig, SecretReference
from agent_runtime.errors import StepFailed
from agent_runtime.secrets import read_secret


@dataclass(frozen=True)
class ProviderSettings:
    name: str
    driver: str
    api_key: str | None = None
    base_url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    include_usage: bool | None = None
    supports_structured_outputs: bool | None = None
    region: str | None = None


def _env(reference: EnvReference, *, provider: str, what: str) -> str:
    value = os.environ.get(reference.env)
    if not value:
        raise StepFailed("provider_config_invalid",
                         f"model provider {provider!r}: {what} names the environment variable "
                         f"{reference.env}, which is not set")
    return value


def provider_settings(name: str, config: RuntimeConfig, *,
                      key_env: str | None = None) -> ProviderSettings:
    """Settings of provider `name`. `key_env` is the driver's conventional key variable:
    with it a key is required; without it (a local server, AWS) a key is optional."""
    driver = config.driver_of(name) or name
    entry = config.providers.get(name)
    if entry is None:
        return ProviderSettings(name=name, driver=driver,
                                api_key=_required_key(name, key_env, configured=False))
    if isinstance(entry.api_key, SecretReference):
        api_key: str | None = read_secret(entry.api_key.secret, field=entry.api_key.field,
                                          provider=name)
    elif entry.api_key is not None:
        api_key = os.environ.get(entry.api_key.env)
        if not api_key:
            raise StepFailed("provider_credentials_missing",
                             f"model provider {name!r} needs an API key: set the environment "
                             f"variable {entry.api_key.env} (providers.{name}.apiKey in the "
                             "runtime config)")
    else:
        api_key = _required_key(name, key_env, configured=True)
    base_url = entry.base_url
    if isinstance(base_url, EnvReference):
        base_url = _env(base_url, provider=name, what=f"providers.{name}.baseURL")
    headers = {header: _env(reference, provider=name, what=f"providers.{name}.headers.{header}")
               for header, reference in (entry.headers or {}).items()}
    return ProviderSettings(name=name, driver=driver, api_key=api_key, base_url=base_url,
                            headers=headers, include_usage=entry.include_usage,
                            supports_structured_outputs=entry.supports_structured_outputs,
                            region=entry.region)


def _required_key(name: str, key_env: str | None, *, configured: bool) -> str | None:
    if key_env is None:
        return None
    value = os.environ.get(key_env)
    if value:
        return value
    where = "in its `providers` entry" if configured else "under `providers` in the runtime config"
    raise StepFailed("provider_credentials_missing",
                     f"model provider {name!r} needs an API key: set the environment variable "
                     f"{key_env}, or name another one with `apiKey: {{env: NAME}}` {where}")
