"""Ports of packages/runtime/src/config.test.ts: the runtime config and what it refuses
before a run exists."""

from __future__ import annotations

from typing import Any

import pytest
from reference_harness import Host, agent

from agent_runtime.config import RuntimeConfig, parse_config
from agent_runtime.errors import ConfigError
from agent_runtime.manifest import ProfileModelRef


def config(**sections: Any) -> RuntimeConfig:
    return parse_config({"version": "1.0", **sections}, source="config.yaml")


def refused(**sections: Any) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        config(**sections)
    return raised.value


def prompt_agent(model: dict[str, Any] | None, **step: Any) -> Any:
    extra = {} if model is None else {"model": model}
    return agent({"id": "answer", "type": "prompt", "prompt": "Answer.", **step}, **extra)


def test_parses_common_local_and_remote_provider_definitions_without_inline_secrets() -> None:
    """runtime/src/config.test.ts: "parses common, local, and remote provider definitions
    without inline secrets"."""
    parsed = config(providers={
        "openai": {"driver": "openai"},
        "ollama": {"driver": "openai-compatible", "baseURL": "http://127.0.0.1:11434/v1"},
        "modal": {"driver": "openai-compatible", "baseURL": {"env": "MODAL_MODEL_URL"},
                  "apiKey": {"env": "MODAL_MODEL_API_KEY"}}},
        models={"quality": {"provider": "openai", "model": "gpt-test"},
                "local": {"provider": "ollama", "model": "qwen-test"}})
    assert parsed.providers["ollama"].driver == "openai-compatible"
    assert (parsed.models["local"].provider, parsed.models["local"].model) == ("ollama",
                                                                               "qwen-test")
    error = refused(providers={"openai": {"driver": "openai", "apiKey": "inline-secret"}})
    assert error.field == "providers.openai.apiKey"


def test_resolves_model_profiles_while_allowing_an_agent_to_override_provider_options(
) -> None:
    """runtime/src/config.test.ts: "resolves model profiles while allowing an agent to
    override safe provider options"."""
    host = Host(config=config(
        providers={"local": {"driver": "openai-compatible",
                             "baseURL": "http://localhost:11434/v1"}},
        models={"private": {"provider": "local", "model": "qwen-test",
                            "options": {"temperature": 0.2},
                            "capabilities": {"tools": False, "maxOutputTokens": 1000}}}))
    resolved = host.runtime.resolve_model(
        ProfileModelRef(ref="private", options={"temperature": 0.5}),
        prompt_agent(None), {})
    assert (resolved.provider, resolved.model, resolved.options) == (
        "local", "qwen-test", {"temperature": 0.5})


def test_rejects_provider_endpoint_credentials_embedded_in_urls() -> None:
    """runtime/src/config.test.ts: "rejects provider endpoint credentials embedded in URLs"
    (refused when the config is read, naming the field)."""
    error = refused(providers={"private": {"driver": "openai-compatible",
                                           "baseURL": "https://user:secret@example.com/v1"}})
    assert error.field == "providers.private.baseURL"
    assert "without URL credentials" in error.reason
    assert "secret" not in error.reason


def test_accepts_explicit_mcp_auth_modes_and_rejects_ambiguous_authorization() -> None:
    """runtime/src/config.test.ts: "accepts explicit MCP auth modes and rejects ambiguous
    authorization configuration". Ours: `bearer` and `none`; `oauth` and
    `client_credentials` are refused by name (no token exchange here; README, runtime
    config)."""
    connection = {"driver": "mcp", "url": "https://mcp.example.com", "tools": ["search"],
                  "readTools": ["search"]}
    config(connections={"service": {**connection, "auth": {
        "type": "bearer", "token": {"env": "MCP_TOKEN"}}}})
    for auth in ({"type": "oauth", "profile": "customer-documents"},
                 {"type": "client_credentials", "clientId": {"env": "MCP_CLIENT_ID"},
                  "clientSecret": {"env": "MCP_CLIENT_SECRET"}}):
        error = refused(connections={"delegated": {**connection, "auth": auth}})
        assert error.field == "connections.delegated.auth.type"
        assert f"{auth['type']} MCP auth is not supported" in error.reason
    error = refused(connections={"invalid": {**connection, "auth": {"type": "none"},
                                             "bearerToken": {"env": "MCP_TOKEN"}}})
    assert "not both" in error.reason


def test_rejects_missing_profiles_capability_mismatches_and_connection_elevation() -> None:
    """runtime/src/config.test.ts: "rejects missing profiles, capability mismatches, and
    connection elevation"."""
    host = Host(config=config(
        providers={"local": {"driver": "openai-compatible",
                             "baseURL": "http://localhost:11434/v1"}},
        models={"local": {"provider": "local", "model": "qwen-test",
                          "capabilities": {"tools": False}}},
        connections={"documents": {"driver": "mcp", "url": "https://mcp.example.com",
                                   "mode": "read", "tools": ["read"], "readTools": ["read"]}}))

    def check(manifest: Any) -> ConfigError:
        with pytest.raises(ConfigError) as raised:
            host.runtime.check_runnable(manifest, {}, source="agent.yaml")
        return raised.value

    missing = check(prompt_agent({"ref": "missing"}))
    assert "model profile 'missing' is not defined" in missing.reason
    error = check(prompt_agent({"ref": "local"}, tools=["docs__read"]))
    assert (error.field, "does not support tools" in error.reason) == ("steps[0].tools", True)
    error = check(agent(connections=[{"ref": "documents", "mode": "read_write"}]))
    assert error.field is not None and error.field.startswith("connections[0]")


@pytest.mark.parametrize(("capabilities", "step", "field"), [
    ({"structuredOutput": False}, {"outputSchema": {"type": "object"}}, "outputSchema"),
    ({"maxOutputTokens": 100}, {"maxOutputTokens": 101}, "maxOutputTokens"),
    ({"imageInput": False}, {"prompt": None, "messages": [{"role": "user", "content": [
        {"type": "image", "url": "https://example.test/a.png"}]}]}, "messages"),
])
def test_model_capabilities_refuse_what_the_model_cannot_do(
        capabilities: dict[str, Any], step: dict[str, Any], field: str) -> None:
    """runtime/src/providers.ts `validateModelCapabilities` (structuredOutput,
    maxOutputTokens); imageInput is ours, by the same rule."""
    host = Host(config=config(models={"m": {"provider": "scripted", "model": "test",
                                            "capabilities": capabilities}}))
    fields = {key: value for key, value in step.items() if value is not None}
    manifest = agent({"id": "answer", "type": "prompt",
                      **({"prompt": "Answer."} if "prompt" not in step else {}), **fields},
                     model={"ref": "m"})
    with pytest.raises(ConfigError) as raised:
        host.runtime.check_runnable(manifest, {}, source="agent.yaml")
    assert raised.value.field == f"steps[0].{field}"
