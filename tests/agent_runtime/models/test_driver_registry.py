"""Every provider driver the runtime config accepts has a driver a run can use:
`config validate` passing means a run starts, never a refusal at run start.
Each driver's SDK is an extra of the distribution, and a missing SDK is named
with the `pip install` that brings it."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import get_args

import pytest

from agent_runtime.cli import main
from agent_runtime.config import BUILT_IN_PROVIDERS, DRIVERS, ProviderConfig, parse_config
from agent_runtime.errors import StepFailed
from agent_runtime.models import DISTRIBUTION, DRIVER_EXTRAS, DRIVER_MODULES, build_adapter

REPO = Path(__file__).resolve().parents[3]
# Handled by the engine itself (agent_runtime/models/scripted.py), not built here.
ENGINE_DRIVERS = {"scripted"}
KEYS = {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k", "GOOGLE_GENERATIVE_AI_API_KEY": "k",
        "XAI_API_KEY": "k", "GROQ_API_KEY": "k", "COHERE_API_KEY": "k"}


def test_every_accepted_driver_has_a_module_and_an_extra() -> None:
    accepted = set(get_args(ProviderConfig.model_fields["driver"].annotation))
    assert accepted == set(DRIVERS)
    assert accepted - ENGINE_DRIVERS == set(DRIVER_MODULES) == set(DRIVER_EXTRAS)
    assert set(BUILT_IN_PROVIDERS.values()) <= accepted
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    assert project["name"] == DISTRIBUTION
    assert set(DRIVER_EXTRAS.values()) <= set(extras)
    # CI and `make dev` install every driver's SDK.
    [own] = [entry for entry in extras["dev"] if entry.startswith(f"{DISTRIBUTION}[")]
    assert set(DRIVER_EXTRAS.values()) <= set(own[own.index("[") + 1:-1].split(","))


@pytest.mark.parametrize("provider", ["google", "gemini", "xai", "grok", "groq", "cohere"])
def test_the_new_built_in_providers_build_an_adapter(provider: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    adapter = build_adapter(provider, parse_config({"version": "1.0"}, source="test"))
    assert callable(adapter.generate)


def test_config_validate_accepts_the_new_providers_and_their_profiles(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models.yaml").write_text("""\
version: "1.0"
providers:
  house-gemini: {driver: google, apiKey: {env: TEAM_GEMINI_KEY}}
  house-grok: {driver: xai, baseURL: "https://api.x.ai/v1"}
  house-groq: {driver: groq, headers: {X-Team: {env: TEAM}}}
  house-cohere: {driver: cohere, baseURL: "https://api.cohere.com/v2"}
models:
  fast: {provider: house-groq, model: llama-3.1-8b-instant}
  smart: {provider: gemini, model: gemini-2.5-pro}
  grok: {provider: grok, model: grok-4}
  command: {provider: cohere, model: command-a-03-2025}
""", encoding="utf-8")
    assert main(["config", "validate", "models.yaml", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("driver", "module", "extra"), [
    ("google", "google.genai", "google"), ("cohere", "cohere", "cohere"),
    ("xai", "aiohttp", "xai"), ("groq", "aiohttp", "groq"), ("openai", "aiohttp", "openai"),
    ("anthropic", "aiohttp", "anthropic")])
def test_a_missing_sdk_is_named_with_the_extra_to_install(
        driver: str, module: str, extra: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [DRIVER_MODULES[driver], "agent_runtime.models.openai",
                 "agent_runtime.models.chat_http"]:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    config = parse_config({"version": "1.0", "providers": {"house": {"driver": driver}}},
                          source="test")
    with pytest.raises(StepFailed) as refused:
        build_adapter("house", config)
    assert refused.value.code == "provider_unavailable"
    assert f"pip install '{DISTRIBUTION}[{extra}]'" in str(refused.value)
    assert f"{module!r}, which is not installed" in str(refused.value)
