"""The contract's rules for an operator's search with `list_runs`: by agent
(`records.agent_of`: the manifest's id, else its name), by id prefix, by
creation time (`created_after <= created_at < created_before`), each ANDed with
the other filters and paged like any listing.
"""

from __future__ import annotations

from typing import Any

import pytest

from stores.base import RunStore
from stores.conformance.builders import at, every_page, make_run
from stores.records import JsonObject, ParentRef, RunStatus

WRITER = {"schema_version": "1.0", "id": "writer", "name": "The writer", "steps": []}


def _manifest(**fields: Any) -> JsonObject:
    return {"schema_version": "1.0", "steps": [], **fields}


class RunSearchConformance:
    """`list_runs(agent=, run_id_prefix=, created_after=, created_before=)`."""

    def test_agent_is_the_manifests_id_else_its_name(self, store: RunStore) -> None:
        for run_id, manifest in [
                ("r1", WRITER),
                ("r2", _manifest(name="writer")),  # no id: its name
                ("r3", _manifest(id="", name="writer")),  # an empty id is no id
                ("r4", _manifest(id="reviewer", name="writer")),  # the id wins
                ("r5", _manifest(id="Writer")),  # case counts
                ("r6", _manifest()),  # neither: no agent
                ("r7", {})]:
            store.create_run(make_run(run_id, manifest=manifest))
        assert self._ids(store, agent="writer") == ["r1", "r2", "r3"]
        assert self._ids(store, agent="reviewer") == ["r4"]
        assert self._ids(store, agent="The writer") == []
        assert self._ids(store, agent="") == []
        assert len(self._ids(store)) == 7

    def test_run_id_prefix_matches_ids_that_start_with_it(self, store: RunStore) -> None:
        ids = ["run_0a1", "run_0a", "run_0b", "run_1", "RUN_0a2", "run_", "run", "é-1", "é",
               "éa", "f"]
        for run_id in ids:
            store.create_run(make_run(run_id))
        assert self._ids(store, run_id_prefix="run_0a") == ["run_0a", "run_0a1"]
        assert self._ids(store, run_id_prefix="run_") == [
            "run_", "run_0a", "run_0a1", "run_0b", "run_1"]
        assert self._ids(store, run_id_prefix="run_0a", newest_first=True) == [
            "run_0a1", "run_0a"]
        assert self._ids(store, run_id_prefix="é") == ["é", "é-1", "éa"]
        assert self._ids(store, run_id_prefix="run_2") == []
        assert self._ids(store, run_id_prefix="") == sorted(ids)

    def test_created_after_and_before_bound_the_creation_time(self, store: RunStore) -> None:
        for n in range(6):
            store.create_run(make_run(f"r{n}", created_at=at(n * 60)))
        assert self._ids(store, created_after=at(60)) == ["r1", "r2", "r3", "r4", "r5"]
        assert self._ids(store, created_before=at(120)) == ["r0", "r1"]  # before is exclusive
        assert self._ids(store, created_after=at(61), created_before=at(240)) == ["r2", "r3"]
        assert self._ids(store, created_after=at(240), created_before=at(240)) == []
        assert self._ids(store, created_after=at(120), newest_first=True) == [
            "r5", "r4", "r3", "r2"]

    def test_the_search_combines_with_every_filter(self, store: RunStore) -> None:
        rows: list[tuple[str, str, str | None, str | None, int]] = [
            # run id, agent, tenant, parent, created at (minutes)
            ("a-1", "writer", "t", None, 1), ("a-2", "writer", "t", None, 5),
            ("a-3", "writer", "u", None, 5), ("a-4", "reviewer", "t", None, 5),
            ("a-5", "writer", "t", "p", 6), ("b-1", "writer", "t", None, 7),
            ("b-2", "writer", None, None, 8)]
        for run_id, agent, tenant, parent, minute in rows:
            ref = None if parent is None else ParentRef(run_id=parent, step_path="loop/0/sub")
            store.create_run(make_run(run_id, manifest=_manifest(id=agent), tenant=tenant,
                                      parent=ref, created_at=at(minute * 60)))
        store.cancel_run("a-2", at=at(600))
        window = {"created_after": at(5 * 60), "created_before": at(8 * 60)}
        assert self._ids(store, agent="writer", **window) == ["a-2", "a-3", "a-5", "b-1"]
        assert self._ids(store, agent="writer", tenant="t", **window) == ["a-2", "a-5", "b-1"]
        assert self._ids(store, agent="writer", tenant="t", newest_first=True, **window) == [
            "b-1", "a-5", "a-2"]
        assert self._ids(store, agent="writer", tenant="t", statuses={RunStatus.CREATED},
                         **window) == ["a-5", "b-1"]
        assert self._ids(store, agent="writer", tenant="t", run_id_prefix="a-", **window) == [
            "a-2", "a-5"]
        assert self._ids(store, agent="writer", parent_run_id="p") == ["a-5"]
        assert self._ids(store, run_id_prefix="a-", parent_run_id="p") == ["a-5"]
        assert self._ids(store, tenant="t", run_id_prefix="b") == ["b-1"]
        assert self._ids(store, agent="writer", lease_expired_before=at(420)) == [
            "a-1", "a-3", "a-5"]
        assert self._ids(store, agent="writer", tenant="nobody") == []
        assert self._ids(store, tenant="t", created_before=at(5 * 60)) == ["a-1"]

    @pytest.mark.parametrize("newest_first", [False, True], ids=["oldest-first", "newest-first"])
    @pytest.mark.parametrize("tenant", [None, "t"], ids=["any-tenant", "one-tenant"])
    def test_search_pages_cover_every_match_exactly_once(
            self, store: RunStore, newest_first: bool, tenant: str | None) -> None:
        for n in range(23):
            agent = "writer" if n % 3 else "reviewer"
            store.create_run(make_run(f"run-{n:02d}", manifest=_manifest(id=agent),
                                      tenant="t" if n % 2 else "u", created_at=at(n * 10)))
        filters: dict[str, Any] = {"agent": "writer", "created_after": at(20),
                                   "created_before": at(200), "tenant": tenant}
        expected = sorted((f"run-{n:02d}" for n in range(2, 20)
                           if n % 3 and (tenant is None or n % 2)), reverse=newest_first)
        assert every_page(store, limit=2, pages=len(expected) + 1, newest_first=newest_first,
                          **filters) == expected
        page = store.list_runs(run_id_prefix="run-1", limit=4, newest_first=newest_first)
        more = store.list_runs(run_id_prefix="run-1", limit=10, newest_first=newest_first,
                               cursor=page.cursor)
        assert [run.run_id for run in page.runs + more.runs] == sorted(
            (f"run-{n}" for n in range(10, 20)), reverse=newest_first)
        assert more.cursor is None

    @staticmethod
    def _ids(store: RunStore, **filters: Any) -> list[str]:
        page = store.list_runs(limit=1000, **filters)
        assert page.cursor is None
        return [run.run_id for run in page.runs]
