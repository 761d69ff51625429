"""The contract's rules for run keys: unique among stored runs, found by
`find_run_key`, taken atomically with the run, freed when the run is deleted.
"""

from __future__ import annotations

import threading

import pytest

from stores.base import InvalidTransition, RunAlreadyExists, RunKeyTaken, RunStore
from stores.conformance.builders import RUN, at, make_run, observe

KEY = "a3f1" * 16  # what the API stores: a sha256 digest in hex


class RunKeyConformance:
    """`run_key`: `create_run` claims it, `find_run_key` finds it, `delete_run` frees it."""

    def test_a_keyed_run_is_found_by_its_key(self, store: RunStore) -> None:
        store.create_run(make_run(run_key=KEY))
        assert store.find_run_key(KEY) == RUN
        loaded = store.load_run(RUN)
        assert loaded is not None and loaded.run_key == KEY

    def test_a_key_nobody_used_finds_nothing(self, store: RunStore) -> None:
        store.create_run(make_run())
        assert store.find_run_key(KEY) is None

    def test_a_second_run_with_the_key_is_refused_naming_the_first(
            self, store: RunStore) -> None:
        store.create_run(make_run(run_key=KEY))
        before = observe(store)
        with pytest.raises(RunKeyTaken) as refused:
            store.create_run(make_run("run-2", run_key=KEY))
        assert refused.value.run_id == RUN
        assert isinstance(refused.value, RunAlreadyExists)
        assert store.load_run("run-2") is None
        assert observe(store) == before
        assert store.find_run_key(KEY) == RUN

    def test_a_taken_id_is_refused_without_taking_the_key(self, store: RunStore) -> None:
        store.create_run(make_run())
        with pytest.raises(RunAlreadyExists) as refused:
            store.create_run(make_run(run_key=KEY))
        assert not isinstance(refused.value, RunKeyTaken)
        assert store.find_run_key(KEY) is None

    def test_keys_are_independent(self, store: RunStore) -> None:
        store.create_run(make_run(run_key=KEY))
        store.create_run(make_run("run-2", run_key=KEY.upper()))
        store.create_run(make_run("run-3"))
        assert (store.find_run_key(KEY), store.find_run_key(KEY.upper())) == (RUN, "run-2")

    def test_deleting_the_run_frees_its_key(self, store: RunStore) -> None:
        store.create_run(make_run(run_key=KEY))
        store.resume_run(RUN, owner="worker", now=at(1), lease_seconds=60)
        store.complete_run(RUN, expected_attempt=1, output="done", at=at(2))
        store.delete_run(RUN)
        assert store.find_run_key(KEY) is None
        store.create_run(make_run("run-2", run_key=KEY))
        assert store.find_run_key(KEY) == "run-2"

    def test_a_run_not_finished_keeps_its_key_when_deletion_is_refused(
            self, store: RunStore) -> None:
        store.create_run(make_run(run_key=KEY))
        with pytest.raises(InvalidTransition):
            store.delete_run(RUN)
        assert store.find_run_key(KEY) == RUN

    def test_concurrent_creates_with_one_key_store_exactly_one_run(
            self, store: RunStore) -> None:
        contenders = 8
        barrier = threading.Barrier(contenders)
        outcomes: list[object] = [None] * contenders

        def create(index: int) -> None:
            barrier.wait(timeout=30)
            try:
                store.create_run(make_run(f"run-{index}", run_key=KEY))
                outcomes[index] = f"run-{index}"
            except Exception as error:  # every outcome is asserted below
                outcomes[index] = error

        threads = [threading.Thread(target=create, args=(n,)) for n in range(contenders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        winners = [o for o in outcomes if isinstance(o, str)]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, RunKeyTaken) and o.run_id == winners[0]
                   for o in outcomes if not isinstance(o, str)), outcomes
        assert store.find_run_key(KEY) == winners[0]
        stored = [n for n in range(contenders) if store.load_run(f"run-{n}") is not None]
        assert stored == [int(winners[0].removeprefix("run-"))]
