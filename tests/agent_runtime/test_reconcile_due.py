"""What a reconciler pass reads follows what is due (issue 32): it never reads a
suspended run with nothing due, serves resumes before new starts, asks for its
room once and lists no more resumes and starts than that, and finds a parent an
earlier release left without a request once, by its first pass's sweep.

On a memory store that records every `list_runs` and `load_run`, with a fake clock.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engine_harness import SCRIPTED, Harness, manifest

from agent_runtime.manifest import manifest_hash, manifest_json
from agent_runtime.reconcile import (
    CHILD_FINISHED,
    RESUME_REQUESTED,
    Action,
    Liveness,
    OwnerStatus,
    Reconciler,
    Resumed,
)
from agent_runtime.steps.subrun import child_run_id_for
from agent_runtime.testing import scripted
from stores.memory import MemoryRunStore
from stores.records import ParentRef, RunPage, RunRecord, RunStatus, Suspension

ONE_STEP = manifest({"id": "only", "type": "prompt", "prompt": "1", "includeInFinalOutput": True})
APPROVAL = manifest({"id": "confirm", "type": "approval", "prompt": "Go?"},
                    {"id": "after", "type": "prompt", "prompt": "a",
                     "includeInFinalOutput": True})
SUB_RUN = manifest(
    {"id": "delegate", "type": "sub-run", "manifest": {
        "schemaVersion": "1.0", "id": "child", "variables": [],
        "steps": [{"id": "confirm", "type": "approval", "prompt": "Go?"},
                  {"id": "after", "type": "prompt", "prompt": "a"}]}},
    {"id": "finish", "type": "prompt", "prompt": "f", "includeInFinalOutput": True})


class RecordingStore(MemoryRunStore):
    """A memory store that notes which runs were read, and how they were listed."""

    def __init__(self) -> None:
        super().__init__()
        self.listings: list[dict[str, Any]] = []
        self.loaded: list[str] = []

    def list_runs(self, **filters: Any) -> RunPage:
        self.listings.append(filters)
        page = super().list_runs(**filters)
        self.loaded += [run.run_id for run in page.runs]
        return page

    def load_run(self, run_id: str) -> RunRecord | None:
        self.loaded.append(run_id)
        return super().load_run(run_id)

    def forget(self) -> None:
        self.listings.clear()
        self.loaded.clear()


def harness() -> tuple[Harness, RecordingStore]:
    store = RecordingStore()
    model = scripted(by_step={"only": [{"text": "one"}] * 5, "after": [{"text": "a"}] * 5,
                              "finish": [{"text": "done"}] * 5})
    return Harness(model, store=store), store


def reconciler(h: Harness, **kwargs: Any) -> Reconciler:
    kwargs.setdefault("runtime_for", lambda run: h.make_runtime(owner="host-r:1"))
    kwargs.setdefault("sweep_sub_run_parents", False)
    return Reconciler(h.store, clock=h.clock, event_sinks=[h.events], **kwargs)


def queue(h: Harness, run_id: str) -> None:
    now = h.clock.now()
    h.store.create_run(RunRecord(run_id=run_id, manifest_hash=manifest_hash(ONE_STEP),
                                 manifest=manifest_json(ONE_STEP), options=SCRIPTED,
                                 created_at=now, updated_at=now))


def waiting(h: Harness, count: int) -> list[str]:
    """`count` runs suspended on an approval nobody gives."""
    return [h.run(APPROVAL, run_id=f"waiting-{n:02d}").run_id for n in range(count)]


def test_a_pass_never_reads_a_suspended_run_with_nothing_due() -> None:
    h, store = harness()
    stranded = waiting(h, 12)
    h.run(SUB_RUN, run_id="parent")  # suspended on its child, which waits too
    approved = h.run(APPROVAL, run_id="approved").run_id
    h.runtime.approve(approved)
    h.clock.advance(3600)
    store.forget()
    summary = reconciler(h).reconcile_sync()
    assert [(o.run_id, o.reason) for o in summary.outcomes] == [(approved, RESUME_REQUESTED)]
    assert not set(store.loaded) & {*stranded, "parent", child_run_id_for("parent", "delegate")}
    suspended = [f for f in store.listings if RunStatus.SUSPENDED in (f.get("statuses") or [])]
    assert suspended and all(f.get("resume_requested_before") for f in suspended)


def test_a_parent_is_due_when_its_child_ends_whatever_its_id() -> None:
    h, store = harness()
    waiting(h, 5)
    h.run(SUB_RUN, run_id="zz-parent")  # after every other id
    child = child_run_id_for("zz-parent", "delegate")
    h.runtime.approve(child)
    h.resume(child)  # the child finishes; nothing tells the parent but the store
    h.clock.advance(31)
    store.forget()
    summary = reconciler(h, page_size=2).reconcile_sync()
    assert [(o.run_id, o.reason, o.status) for o in summary.outcomes] == [
        ("zz-parent", CHILD_FINISHED, RunStatus.COMPLETED)]
    # The parent (listed, read fresh, resumed) and, resumed, its child: no waiting run.
    assert set(store.loaded) == {"zz-parent", child}


def test_resumes_are_served_before_new_starts() -> None:
    h, _ = harness()
    queue(h, "a-queued")
    approved = h.run(APPROVAL, run_id="z-approved").run_id
    h.runtime.approve(approved)
    h.clock.advance(61)
    outcomes = reconciler(h).reconcile_sync().outcomes
    assert [(o.run_id, o.action) for o in outcomes] == [("z-approved", Action.RESUMED),
                                                        ("a-queued", Action.RESUMED)]


def test_a_pass_asks_for_its_room_once_and_lists_no_more_than_it() -> None:
    h, store = harness()
    for n in range(3):
        queue(h, f"queued-{n}")
    for run_id in ("approved-1", "approved-2"):
        h.run(APPROVAL, run_id=run_id)
        h.runtime.approve(run_id)
    h.clock.advance(61)
    asked: list[int] = []

    def room() -> int:
        asked.append(1)
        return 3

    store.forget()
    summary = reconciler(h, room=room).reconcile_sync()
    assert [o.run_id for o in summary.outcomes] == ["approved-1", "approved-2", "queued-0"]
    assert asked == [1]
    assert summary.deferred == "no room for more resumes or starts this pass"
    assert "reconcile.deferred" in h.types("reconcile.")
    assert not {"queued-1", "queued-2"} & set(store.loaded)  # the rest of the queue: unread
    assert max(f["limit"] for f in store.listings if f.get("lease_expired_before")
               and RunStatus.CREATED in f["statuses"]) == 1


def test_a_pass_without_room_lists_no_resume_or_start_but_still_takes_over() -> None:
    h, store = harness()
    queue(h, "queued")
    queue(h, "stranded")
    h.store.resume_run("stranded", owner="host-a:111", now=h.clock.now(), lease_seconds=30)
    h.clock.advance(61)
    handed: list[str] = []

    async def hand_over(run: RunRecord) -> Resumed:
        handed.append(run.run_id)
        return Resumed(run.attempt + 1)

    store.forget()
    rec = reconciler(h, room=lambda: 0, resume=hand_over,
                     liveness=lambda run: OwnerStatus(Liveness.GONE, "its pid is gone"))
    summary = rec.reconcile_sync()
    assert handed == ["stranded"]  # a takeover replaces a running run: it needs no room
    assert summary.deferred is not None
    assert "queued" not in store.loaded


def test_the_first_pass_finds_a_parent_an_earlier_release_left_without_a_request() -> None:
    h, store = harness()
    ended = h.clock.now()
    parent = RunRecord(run_id="parent", manifest_hash=manifest_hash(SUB_RUN),
                       manifest=manifest_json(SUB_RUN), options=SCRIPTED,
                       status=RunStatus.SUSPENDED, attempt=1,
                       suspension=Suspension(reason="sub-run",
                                             details={"child_run_id": "parent.child"}))
    child = RunRecord(run_id="parent.child", manifest_hash="sha256:" + "00" * 32,
                      status=RunStatus.COMPLETED, attempt=1, output="a", updated_at=ended,
                      parent=ParentRef(run_id="parent", step_path="delegate"))
    for record in (parent, child):  # stored as an earlier release left them: no request
        h.store.create_run(record)
    h.clock.advance(timedelta(hours=1).total_seconds())
    assert reconciler(h).reconcile_sync().outcomes == []  # without the sweep: never read
    handed: list[str] = []

    async def hand_over(run: RunRecord) -> Resumed:
        handed.append(run.run_id)
        return Resumed(run.attempt + 1)

    rec = reconciler(h, resume=hand_over, sweep_sub_run_parents=True)
    first = rec.reconcile_sync()
    assert [(o.run_id, o.reason) for o in first.outcomes] == [("parent", CHILD_FINISHED)]
    filed = next(e for e in h.events.events if e.type == "reconcile.request-filed")
    assert (filed.run_id, filed.data["child_run_id"]) == ("parent", "parent.child")
    record = h.store.load_run("parent")
    assert record is not None and record.resume_requested_at == ended
    store.forget()
    rec.reconcile_sync()  # the next pass does not sweep again
    assert not [f for f in store.listings if f.get("statuses") == [RunStatus.SUSPENDED]
                and not f.get("resume_requested_before")]
