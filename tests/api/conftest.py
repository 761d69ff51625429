"""Fixtures of the API tests: a store of each local kind and the API on it (the route
tests), and a webhook receiver that holds its answers (the serve tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from routes_harness import Api
from slow_receiver import SlowReceiver, slow_receiver

from stores.base import RunStore
from stores.memory import MemoryRunStore
from stores.sqlite import SqliteRunStore


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunStore]:
    opened: RunStore = (MemoryRunStore() if request.param == "memory"
                        else SqliteRunStore(tmp_path / "runs.sqlite"))
    with opened:
        yield opened


@pytest.fixture
def api(store: RunStore) -> Api:
    return Api(store)


@pytest.fixture
def receiver() -> Iterator[SlowReceiver]:
    with slow_receiver() as state:
        yield state
