"""`ModelAdapters`: the adapters of one runtime config, one per provider, shared by the
runtimes a host builds from that config (agent_runtime/models/adapters.py)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agent_runtime.config import RuntimeConfig, parse_config
from agent_runtime.engine import AgentRuntime
from agent_runtime.models.adapters import ModelAdapters

PROVIDERS = {"local": {"driver": "openai-compatible", "baseURL": "http://127.0.0.1:9/v1"},
             "other": {"driver": "openai-compatible", "baseURL": "http://127.0.0.1:9/v2"}}


def config_of(providers: dict[str, Any]) -> RuntimeConfig:
    return parse_config({"version": "1.0", "providers": providers}, source="test")


def test_runtimes_given_one_set_share_each_providers_adapter() -> None:
    adapters = ModelAdapters(config_of(PROVIDERS))
    first, second = AgentRuntime(adapters=adapters), AgentRuntime(adapters=adapters)
    assert first.config is adapters.config  # the set's config is the runtime's
    assert first.adapter_for("local") is second.adapter_for("local")
    assert first.adapter_for("other") is not first.adapter_for("local")
    # A runtime built without a set has adapters of its own.
    alone = AgentRuntime(config=adapters.config)
    assert alone.adapter_for("local") is not first.adapter_for("local")


def test_threads_asking_at_once_all_get_the_one_adapter_kept() -> None:
    adapters = ModelAdapters(config_of(PROVIDERS))
    start = threading.Barrier(8)
    got: list[object] = []

    def ask() -> None:
        start.wait()
        got.append(adapters.adapter("local"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 8 and all(adapter is got[0] for adapter in got)


def test_adapters_of_another_config_than_the_runtimes_are_refused() -> None:
    adapters = ModelAdapters(config_of(PROVIDERS))
    with pytest.raises(ValueError, match="another config"):
        AgentRuntime(config=config_of(PROVIDERS), adapters=adapters)
