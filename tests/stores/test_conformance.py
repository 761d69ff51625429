"""The RunStore contract suite on every local backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from stores.base import RunStore
from stores.conformance import RunStoreConformance
from stores.conformance.settlements import SettlementConformance
from stores.file import FileRunStore
from stores.memory import MemoryRunStore
from stores.sqlite import SqliteRunStore
from tests.stores.sqlite_groups import AccompaniedStore


class TestMemoryRunStore(SettlementConformance, RunStoreConformance):
    @pytest.fixture
    def store(self) -> Iterator[RunStore]:
        with MemoryRunStore() as store:
            yield store


class TestSqliteRunStore(SettlementConformance, RunStoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[RunStore]:
        with SqliteRunStore(tmp_path / "runs.sqlite") as store:
            yield store


class TestSqliteRunStoreInGroups(SettlementConformance, RunStoreConformance):
    """Every write shares its group commit with another, so is made in a savepoint."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[RunStore]:
        with AccompaniedStore(SqliteRunStore(tmp_path / "runs.sqlite")) as store:
            yield cast(RunStore, store)


class TestFileRunStore(RunStoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[RunStore]:
        with FileRunStore(tmp_path / "runs") as store:
            yield store
