"""The contract's rules for `list_runs`: its order (by run_id, either way), its
filters (status, lease expiry, parent, tenant, resume requests, all ANDed) and
its pages, which cover every matching run exactly once in either direction.
"""

from __future__ import annotations

from typing import Any

import pytest

from stores.base import RunStore
from stores.conformance.builders import ERROR, LEASE_SECONDS, NOW, at, every_page, make_run
from stores.records import ParentRef, RunStatus


class ListingConformance:
    """`list_runs`: order, filters, pages."""

    def test_list_runs_orders_by_run_id(self, store: RunStore) -> None:
        ids = ["b", "a-2", "c", "a-10", "B", "a-1"]
        for run_id in ids:
            store.create_run(make_run(run_id))
        page = store.list_runs()
        assert [run.run_id for run in page.runs] == sorted(ids)
        assert page.cursor is None
        assert page.runs[0] == make_run("B")

    def test_list_runs_filters_by_status(self, store: RunStore) -> None:
        self._population(store)
        assert self._ids(store, statuses={RunStatus.COMPLETED, RunStatus.FAILED}) == [
            "f-completed", "g-failed"]
        assert self._ids(store, statuses={RunStatus.RUNNING}) == [
            "c-running-expired", "d-running-live"]
        assert len(self._ids(store)) == 8

    def test_list_runs_lease_expired_before_matches_expired_running_and_old_created_only(
            self, store: RunStore) -> None:
        self._population(store)
        assert self._ids(store, lease_expired_before=at(600)) == [
            "a-created-old", "c-running-expired"]
        assert self._ids(store, lease_expired_before=at(600), statuses={RunStatus.RUNNING}) == [
            "c-running-expired"]
        assert self._ids(store, lease_expired_before=at(-7200)) == []

    def test_list_runs_filters_by_parent_run_id(self, store: RunStore) -> None:
        for run_id, parent in [("c3", "p1"), ("c1", "p1"), ("c2", "p2"), ("c0", None)]:
            ref = None if parent is None else ParentRef(run_id=parent, step_path="loop/0/sub")
            store.create_run(make_run(run_id, parent=ref))
        assert self._ids(store, parent_run_id="p1") == ["c1", "c3"]
        assert self._ids(store, parent_run_id="p9") == []

    @pytest.mark.parametrize("newest_first", [False, True], ids=["oldest-first", "newest-first"])
    @pytest.mark.parametrize("filtered", ["all", "status", "tenant"])
    def test_list_runs_pages_cover_every_run_exactly_once(self, store: RunStore, filtered: str,
                                                          newest_first: bool) -> None:
        ids = [f"run-{n:02d}" for n in (7, 3, 11, 1, 9, 5, 2, 10, 4, 8, 6)]
        for n, run_id in enumerate(ids):
            store.create_run(make_run(run_id, tenant="odd" if n % 2 else "even"))
            if filtered == "status" and n % 2:
                store.cancel_run(run_id, at=at(1))
        options: dict[str, dict[str, Any]] = {
            "all": {}, "status": {"statuses": {RunStatus.CREATED}}, "tenant": {"tenant": "even"}}
        filters = options[filtered]
        expected = sorted((r for n, r in enumerate(ids) if filtered == "all" or not n % 2),
                          reverse=newest_first)
        assert every_page(store, limit=3, pages=len(ids) + 1, newest_first=newest_first,
                          **filters) == expected

    def test_list_runs_cursor_is_none_on_a_single_page(self, store: RunStore) -> None:
        for run_id in ("a", "b", "c"):
            store.create_run(make_run(run_id))
        page = store.list_runs(limit=10)
        assert ([run.run_id for run in page.runs], page.cursor) == (["a", "b", "c"], None)
        assert store.list_runs(statuses={RunStatus.FAILED}, limit=10).model_dump() == {
            "runs": [], "cursor": None}

    def test_list_runs_newest_first_orders_by_run_id_descending(self, store: RunStore) -> None:
        ids = ["b", "a-2", "c", "a-10", "B", "a-1"]
        for run_id in ids:
            store.create_run(make_run(run_id))
        store.cancel_run("c", at=at(1))
        assert self._ids(store, newest_first=True) == sorted(ids, reverse=True)
        assert self._ids(store, newest_first=True, statuses={RunStatus.CREATED}) == [
            "b", "a-2", "a-10", "a-1", "B"]

    @pytest.mark.parametrize("newest_first", [False, True], ids=["oldest-first", "newest-first"])
    def test_list_runs_cursor_continues_in_the_listings_direction(
            self, store: RunStore, newest_first: bool) -> None:
        for run_id in ("e", "a", "c", "f", "b", "d"):
            store.create_run(make_run(run_id, tenant="t"))
        for filters in ({}, {"tenant": "t"}, {"statuses": {RunStatus.CREATED}}):
            page = store.list_runs(cursor="c", newest_first=newest_first, **filters)
            assert ([run.run_id for run in page.runs], page.cursor) == (
                (["b", "a"] if newest_first else ["d", "e", "f"]), None), filters
            # A cursor that names no run continues from where it would sort.
            page = store.list_runs(cursor="cc", newest_first=newest_first, limit=1, **filters)
            assert ([run.run_id for run in page.runs], page.cursor) == (
                (["c"], "c") if newest_first else (["d"], "d")), filters

    def test_list_runs_filters_by_tenant(self, store: RunStore) -> None:
        for run_id, tenant, parent in [("r5", "a", "p1"), ("r1", "a", None), ("r2", "b", None),
                                       ("r3", None, None), ("r4", "a", None), ("r6", "A", None),
                                       ("r7", "b", "p1")]:
            ref = None if parent is None else ParentRef(run_id=parent, step_path="loop/0/sub")
            store.create_run(make_run(run_id, tenant=tenant, parent=ref))
        store.cancel_run("r4", at=at(1))
        assert self._ids(store, tenant="a") == ["r1", "r4", "r5"]
        assert self._ids(store, tenant="a", newest_first=True) == ["r5", "r4", "r1"]
        assert self._ids(store, tenant="a", statuses={RunStatus.CREATED}) == ["r1", "r5"]
        assert self._ids(store, tenant="a", parent_run_id="p1") == ["r5"]
        assert self._ids(store, tenant="b", lease_expired_before=at(600)) == ["r2", "r7"]
        assert self._ids(store, tenant="nobody") == []
        loaded = store.list_runs(tenant="A").runs
        assert [(run.run_id, run.tenant) for run in loaded] == [("r6", "A")]

    def test_list_runs_resume_requested_before_matches_suspended_runs_asked_earlier(
            self, store: RunStore) -> None:
        def suspended(run_id: str, tenant: str | None = None, reason: str = "sub-run") -> None:
            store.create_run(make_run(run_id, tenant=tenant))
            store.resume_run(run_id, owner="o", now=NOW, lease_seconds=LEASE_SECONDS)
            store.suspend_run(run_id, expected_attempt=1, reason=reason, at=at(5),
                              details={"approval_id": "approval-1"})

        suspended("a-not-asked")
        suspended("b-asked-early", tenant="t")
        store.request_resume("b-asked-early", at=at(10), reason="sub-run-finished")
        suspended("c-asked-late", tenant="t")
        store.request_resume("c-asked-late", at=at(500), reason="sub-run-finished")
        suspended("d-approved", reason="approval")
        store.resolve_approval("d-approved", "approval-1", approved=True, response=None,
                               responded_by=None, at=at(20))
        suspended("e-resumed")
        store.request_resume("e-resumed", at=at(10), reason="sub-run-finished")
        store.resume_run("e-resumed", owner="o", now=at(30), lease_seconds=LEASE_SECONDS)
        suspended("f-cancelled")
        store.request_resume("f-cancelled", at=at(10), reason="sub-run-finished")
        store.cancel_run("f-cancelled", at=at(30))
        store.create_run(make_run("g-created", created_at=at(-3600)))

        assert self._ids(store, resume_requested_before=at(100)) == [
            "b-asked-early", "d-approved"]
        assert self._ids(store, resume_requested_before=at(1000)) == [
            "b-asked-early", "c-asked-late", "d-approved"]
        assert self._ids(store, resume_requested_before=at(10)) == []  # strictly before
        assert self._ids(store, resume_requested_before=at(1000), newest_first=True) == [
            "d-approved", "c-asked-late", "b-asked-early"]
        assert self._ids(store, resume_requested_before=at(1000), tenant="t") == [
            "b-asked-early", "c-asked-late"]
        assert self._ids(store, resume_requested_before=at(1000),
                         statuses={RunStatus.RUNNING, RunStatus.CANCELLED}) == []
        assert self._ids(store, resume_requested_before=at(1000),
                         lease_expired_before=at(1000)) == []
        page = store.list_runs(resume_requested_before=at(1000), limit=2)
        assert ([run.run_id for run in page.runs], page.cursor) == (
            ["b-asked-early", "c-asked-late"], "c-asked-late")
        page = store.list_runs(resume_requested_before=at(1000), limit=2, cursor=page.cursor)
        assert ([run.run_id for run in page.runs], page.cursor) == (["d-approved"], None)

    @staticmethod
    def _ids(store: RunStore, **filters: Any) -> list[str]:
        page = store.list_runs(limit=1000, **filters)
        assert page.cursor is None
        return [run.run_id for run in page.runs]

    @staticmethod
    def _population(store: RunStore) -> None:
        """One run per situation `lease_expired_before=at(600)` must tell apart."""
        store.create_run(make_run("a-created-old", created_at=at(-3600)))
        store.create_run(make_run("b-created-new", created_at=at(3600)))
        for run_id in ("c-running-expired", "d-running-live", "e-suspended", "f-completed",
                       "g-failed", "h-cancelled"):
            store.create_run(make_run(run_id, created_at=at(-3600)))
            lease = 7200 if run_id == "d-running-live" else 60
            store.resume_run(run_id, owner="o", now=NOW, lease_seconds=lease)
        store.suspend_run("e-suspended", expected_attempt=1, reason="sub-run", details={}, at=NOW)
        store.complete_run("f-completed", expected_attempt=1, output=None, at=NOW)
        store.fail_run("g-failed", expected_attempt=1, error=ERROR, at=NOW)
        store.cancel_run("h-cancelled", at=NOW)
