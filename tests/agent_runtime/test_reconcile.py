"""The reconciler on a memory store with a fake clock: which runs it takes over,
which it leaves alone, when it gives up on a run, and how it loses races."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from engine_harness import SCRIPTED, Harness, manifest

from agent_runtime import AgentRuntime, RunStatus, ToolContext, tool
from agent_runtime.errors import ConfigError
from agent_runtime.manifest import manifest_hash, manifest_json
from agent_runtime.reconcile import (
    CHILD_FINISHED,
    RESUME_REQUESTED,
    Action,
    Liveness,
    LostRace,
    OwnerStatus,
    ProcessLiveness,
    Reconciler,
    ReconcileSummary,
    Resumed,
)
from agent_runtime.steps.subrun import child_run_id_for
from agent_runtime.testing import scripted
from stores.records import Checkpoint, RunRecord

DEAD = "host-a:111"
ALIVE = "host-a:222"

THREE_STEPS = manifest({"id": "first", "type": "prompt", "prompt": "1", "outputVariable": "one"},
                       {"id": "second", "type": "prompt", "prompt": "2"},
                       {"id": "third", "type": "prompt", "prompt": "3",
                        "includeInFinalOutput": True})


class Owners:
    """A LivenessCheck answering from a table; anything else is unknown.

    `on_check` runs before the answer: a stand-in for what another
    reconciler does at that moment."""

    def __init__(self, table: dict[str, Liveness] | None = None,
                 on_check: Callable[[RunRecord], None] | None = None) -> None:
        self.table = table if table is not None else {DEAD: Liveness.GONE,
                                                      ALIVE: Liveness.ALIVE}
        self.on_check = on_check
        self.asked: list[str | None] = []

    def __call__(self, run: RunRecord) -> OwnerStatus:
        self.asked.append(run.lease_owner)
        if self.on_check is not None:
            self.on_check(run)
        liveness = self.table.get(run.lease_owner or "", Liveness.UNKNOWN)
        return OwnerStatus(liveness, f"{run.lease_owner} is {liveness.value}")


def three_step_model() -> Any:
    return scripted(by_step={"first": [{"text": "one"}], "second": [{"text": "two"}],
                             "third": [{"text": "three"}]})


def reconciler(h: Harness, *, owners: Owners | None = None, **kwargs: Any) -> Reconciler:
    kwargs.setdefault("runtime_for", lambda run: h.make_runtime(owner="host-r:1"))
    return Reconciler(h.store, liveness=owners or Owners(), clock=h.clock,
                      event_sinks=[h.events], **kwargs)


def queued(h: Harness, run_id: str, agent: Any = THREE_STEPS) -> RunRecord:
    """A run created and never started (its creator died before reserving it)."""
    now = h.clock.now()
    record = RunRecord(run_id=run_id, manifest_hash=manifest_hash(agent),
                       manifest=manifest_json(agent), options=SCRIPTED, created_at=now,
                       updated_at=now)
    h.store.create_run(record)
    return record


def stranded(h: Harness, run_id: str, owner: str, *, takeovers: int = 0) -> RunRecord:
    """A running run whose owner stopped renewing: reserved by `owner`, lease expired.

    Each of `takeovers` is a takeover by a later owner that died too."""
    queued(h, run_id)
    h.store.resume_run(run_id, owner=owner, now=h.clock.now(), lease_seconds=30)
    for _ in range(takeovers):
        h.clock.advance(31)
        h.store.resume_run(run_id, owner=owner, now=h.clock.now(), lease_seconds=30,
                           allow_running_takeover=True)
    h.clock.advance(31)
    record = h.store.load_run(run_id)
    assert record is not None and record.takeovers == takeovers
    return record


def by_run(summary: ReconcileSummary) -> dict[str, Any]:
    return {outcome.run_id: outcome for outcome in summary.outcomes}


def reconcile_types(h: Harness) -> list[str]:
    return h.types("reconcile.")


class Crash(BaseException):
    """The process dies here."""


def test_a_run_whose_owner_died_resumes_from_its_checkpoint() -> None:
    crashes: list[str] = []

    @tool
    def fetch(ctx: ToolContext) -> str:
        """Fetch."""
        if not crashes:
            crashes.append(ctx.run_id)
            raise Crash()
        return "fetched"

    model = scripted(by_step={
        "first": [{"text": "one"}],
        "second": [{"toolCalls": [{"name": "fetch", "arguments": {}}]}, {"text": "two"}],
        "third": [{"text": "three"}]})
    h = Harness(model, tools=[fetch])
    agent = manifest({"id": "first", "type": "prompt", "prompt": "1"},
                     {"id": "second", "type": "prompt", "prompt": "2", "tools": ["fetch"]},
                     {"id": "third", "type": "prompt", "prompt": "3",
                      "includeInFinalOutput": True})
    with pytest.raises(Crash):
        h.make_runtime(owner=DEAD).run_sync(manifest=agent, options=SCRIPTED, run_id="r1")
    asked_before = len(model.requests)
    rec = reconciler(h)

    assert rec.reconcile_sync().outcomes == []  # the lease is still live: not a candidate
    h.clock.advance(31)
    summary = rec.reconcile_sync()

    outcome = by_run(summary)["r1"]
    assert outcome.action is Action.RESUMED and outcome.status is RunStatus.COMPLETED
    assert outcome.attempt == 2 and outcome.takeovers == 1
    record = h.store.load_run("r1")
    assert record is not None and record.status is RunStatus.COMPLETED
    # The new attempt's checkpoints were progress: no takeover in a row is left.
    assert record.output == "three" and record.takeovers == 0
    assert ("run.resumed", 2) in [(e.type, e.attempt) for e in h.events.events]
    # `first` was checkpointed before the crash: not asked again
    assert [r.step_id for r in model.requests[asked_before:]] == ["second", "third"]
    assert summary.counts() == {"candidates": 1, "resumed": 1, "skipped": 0, "suspended_runs": 0,
                                "errors": 0}
    assert reconcile_types(h) == ["reconcile.started", "reconcile.completed",
                                  "reconcile.started", "reconcile.resumed",
                                  "reconcile.completed"]
    resumed = next(e for e in h.events.events if e.type == "reconcile.resumed")
    assert (resumed.run_id, resumed.attempt, resumed.data["status"]) == ("r1", 2, "completed")


def test_with_dead_owners_early_a_gone_owner_is_taken_over_before_its_lease_expires() -> None:
    h = Harness(three_step_model())
    for run_id, owner in (("dead", DEAD), ("alive", ALIVE), ("elsewhere", "host-b:333")):
        queued(h, run_id)
        h.store.resume_run(run_id, owner=owner, now=h.clock.now(), lease_seconds=600)
    # The lease has ten minutes to go; the clock does not move.
    assert reconciler(h).reconcile_sync().outcomes == []  # the default: wait for leases
    summary = reconciler(h, dead_owners_early=True).reconcile_sync()

    outcomes = by_run(summary)
    assert set(outcomes) == {"dead"}  # live and unknown owners are not even candidates
    assert (outcomes["dead"].action, outcomes["dead"].status) == (Action.RESUMED,
                                                                  RunStatus.COMPLETED)
    for run_id in ("alive", "elsewhere"):
        record = h.store.load_run(run_id)
        assert record is not None and (record.status, record.attempt) == (RunStatus.RUNNING, 1)


def test_a_live_owner_and_an_unknown_owner_are_left_alone_even_with_expired_leases() -> None:
    h = Harness(three_step_model())
    stranded(h, "alive", ALIVE)
    stranded(h, "elsewhere", "host-b:333")
    owners = Owners()
    summary = reconciler(h, owners=owners).reconcile_sync()

    outcomes = by_run(summary)
    assert (outcomes["alive"].action, outcomes["alive"].reason) == (Action.SKIPPED,
                                                                    "owner-alive")
    assert (outcomes["elsewhere"].action, outcomes["elsewhere"].reason) == (Action.SKIPPED,
                                                                            "owner-unknown")
    for run_id in ("alive", "elsewhere"):
        record = h.store.load_run(run_id)
        assert record is not None
        assert (record.status, record.attempt, record.takeovers) == (RunStatus.RUNNING, 1, 0)
    skipped = [e for e in h.events.events if e.type == "reconcile.skipped"]
    assert {(e.run_id, e.data["reason"]) for e in skipped} == {
        ("alive", "owner-alive"), ("elsewhere", "owner-unknown")}
    assert all(e.data["detail"] for e in skipped)  # says why
    assert h.types("run.") == []  # nothing was executed
    assert sorted(owners.asked, key=str) == [ALIVE, "host-b:333"]


def test_a_run_taken_over_up_to_the_bound_is_suspended_as_a_crash_loop_not_failed() -> None:
    h = Harness(three_step_model())
    stranded(h, "looping", DEAD, takeovers=3)
    stranded(h, "unlucky", DEAD, takeovers=2)
    summary = reconciler(h, max_takeovers=3).reconcile_sync()

    outcomes = by_run(summary)
    assert outcomes["looping"].action is Action.SUSPENDED_RUN
    assert outcomes["looping"].takeovers == 3
    record = h.store.load_run("looping")
    assert record is not None and record.status is RunStatus.SUSPENDED
    assert record.error is None and record.suspension is not None
    assert record.suspension.reason == "crash-loop"
    details = record.suspension.details
    assert "died 4 times" in details["message"]
    assert "taken over 3 times, the limit is 3" in details["message"]
    assert details["last_owner"] == DEAD
    suspended = next(e for e in h.events.events if e.type == "reconcile.suspended-run")
    assert (suspended.run_id, suspended.data["takeovers"]) == ("looping", 3)
    # one takeover below the bound: resumed once more
    assert outcomes["unlucky"].action is Action.RESUMED
    assert outcomes["unlucky"].status is RunStatus.COMPLETED
    assert summary.counts()["suspended_runs"] == 1
    # A later pass leaves it alone: nothing is due until an operator resumes it.
    assert "looping" not in by_run(reconciler(h, max_takeovers=3).reconcile_sync())


def test_a_bound_of_zero_suspends_a_run_the_first_time_its_owner_dies() -> None:
    h = Harness(three_step_model())
    stranded(h, "r", DEAD)
    outcome = by_run(reconciler(h, max_takeovers=0).reconcile_sync())["r"]
    assert outcome.action is Action.SUSPENDED_RUN
    record = h.store.load_run("r")
    assert record is not None and record.suspension is not None
    assert "died 1 times" in record.suspension.details["message"]


def test_a_crash_looped_run_resumed_after_a_fix_completes_with_its_count_reset() -> None:
    h = Harness(three_step_model())
    stranded(h, "r", DEAD, takeovers=3)
    assert by_run(reconciler(h, max_takeovers=3).reconcile_sync())["r"].action \
        is Action.SUSPENDED_RUN
    record = h.store.load_run("r")
    assert record is not None and record.takeovers == 3

    # The operator's resume (the fix deployed): a new attempt, the count at 0,
    # and the run goes on from where it was (no checkpoint: from the start).
    result = h.make_runtime(owner="host-a:1").run_sync(run_id="r", resume=True)
    assert (result.status, result.attempt) == (RunStatus.COMPLETED, 5)
    record = h.store.load_run("r")
    assert record is not None and record.takeovers == 0


def test_resume_crash_looped_resumes_every_crash_looped_run_and_no_other() -> None:
    h = Harness(three_step_model())
    for run_id in ("loop-a", "loop-b"):
        stranded(h, run_id, DEAD, takeovers=3)
    stranded(h, "alive", ALIVE, takeovers=3)
    rec = reconciler(h, max_takeovers=3)
    assert by_run(rec.reconcile_sync())["loop-b"].action is Action.SUSPENDED_RUN
    # Another run suspended for another reason is not the operator's to resume here.
    h.store.suspend_run("alive", expected_attempt=4, reason="approval",
                        details={"approval_id": "a1"}, at=h.clock.now())

    summary = asyncio.run(rec.resume_crash_looped())

    outcomes = by_run(summary)
    assert sorted(outcomes) == ["loop-a", "loop-b"]
    for run_id in ("loop-a", "loop-b"):
        assert (outcomes[run_id].action, outcomes[run_id].reason) == (Action.RESUMED,
                                                                      "crash-loop")
        record = h.store.load_run(run_id)
        assert record is not None
        assert (record.status, record.takeovers) == (RunStatus.COMPLETED, 0)
    waiting = h.store.load_run("alive")
    assert waiting is not None and waiting.status is RunStatus.SUSPENDED
    assert waiting.suspension is not None and waiting.suspension.reason == "approval"
    # Nothing crash-looped is left: a second call finds nothing.
    assert asyncio.run(rec.resume_crash_looped()).outcomes == []


def test_a_crash_looped_run_whose_resume_is_refused_keeps_its_request_for_a_later_pass(
        ) -> None:
    h = Harness(three_step_model())
    stranded(h, "r", DEAD, takeovers=3)
    rec = reconciler(h, max_takeovers=3)
    rec.reconcile_sync()

    async def at_capacity(run: RunRecord) -> Resumed:
        raise LostRace("left as it is: no capacity slot")

    refused = Reconciler(h.store, liveness=Owners(), clock=h.clock, resume=at_capacity)
    outcome = by_run(asyncio.run(refused.resume_crash_looped()))["r"]
    assert (outcome.action, outcome.reason) == (Action.SKIPPED, "lost-race")
    record = h.store.load_run("r")
    assert record is not None and record.resume_requested_at is not None
    # The request is the reconciler's outbox: a pass past the grace resumes it.
    h.clock.advance(rec.resume_grace + 1)
    outcome = by_run(rec.reconcile_sync())["r"]
    assert (outcome.action, outcome.status) == (Action.RESUMED, RunStatus.COMPLETED)


def test_the_crash_loop_suspension_is_fenced_by_the_attempt_that_died() -> None:
    h = Harness(three_step_model())
    stranded(h, "r", DEAD, takeovers=3)

    def another_reconciler_takes_over(run: RunRecord) -> None:
        h.store.resume_run(run.run_id, owner="host-other:9", now=h.clock.now(),
                           lease_seconds=30, allow_running_takeover=True)

    outcome = by_run(reconciler(h, owners=Owners(on_check=another_reconciler_takes_over))
                     .reconcile_sync())["r"]
    assert (outcome.action, outcome.reason) == (Action.SKIPPED, "lost-race")
    assert "StaleAttempt" in (outcome.detail or "")
    record = h.store.load_run("r")
    assert record is not None
    assert (record.status, record.attempt, record.lease_owner) == (RunStatus.RUNNING, 5,
                                                                   "host-other:9")


def test_a_created_run_queued_past_the_threshold_is_started() -> None:
    h = Harness(three_step_model())
    queued(h, "queued")
    rec = reconciler(h, queued_seconds=60)
    h.clock.advance(30)
    assert rec.reconcile_sync().outcomes == []  # its creator may still be starting it
    h.clock.advance(31)
    summary = rec.reconcile_sync()

    outcome = by_run(summary)["queued"]
    assert (outcome.action, outcome.status, outcome.attempt) == (Action.RESUMED,
                                                                 RunStatus.COMPLETED, 1)
    assert outcome.takeovers == 0
    record = h.store.load_run("queued")
    assert record is not None and record.output == "three" and record.takeovers == 0
    assert "run.started" in h.types("run.")
    assert "reconcile.resumed" in reconcile_types(h)


def test_two_reconcilers_with_the_same_stale_listing_resume_the_run_once() -> None:
    model = three_step_model()
    h = Harness(model)
    listed = stranded(h, "r", DEAD)
    one, two = reconciler(h), reconciler(h)

    won = one.reconcile_sync().outcomes
    late = asyncio.run(two.reconcile_run(listed))  # decides on what it listed before

    assert [o.action for o in won] == [Action.RESUMED]
    assert (late.action, late.reason) == (Action.SKIPPED, "lost-race")
    assert "now completed, attempt 2" in (late.detail or "")
    assert len(model.requests) == 3  # each step asked once
    record = h.store.load_run("r")
    assert record is not None and (record.attempt, record.takeovers) == (2, 0)


@pytest.mark.parametrize("winner", ["finishes", "holds"])
def test_a_reconciler_beaten_to_the_reservation_reports_a_lost_race(winner: str) -> None:
    """Both reconcilers decided to take over; the other reserves first."""
    model = three_step_model()
    h = Harness(model)
    listed = stranded(h, "r", DEAD)
    other = reconciler(h)

    def runtime_for(run: RunRecord) -> AgentRuntime:
        if winner == "finishes":
            # called inside this reconciler's event loop: the other one runs in a thread
            thread = threading.Thread(target=lambda: asyncio.run(other.reconcile_run(listed)))
            thread.start()
            thread.join()
        else:
            h.store.resume_run("r", owner="host-other:9", now=h.clock.now(), lease_seconds=30,
                               allow_running_takeover=True)
        return h.make_runtime(owner="host-r:1")

    outcome = by_run(reconciler(h, runtime_for=runtime_for).reconcile_sync())["r"]
    assert (outcome.action, outcome.reason) == (Action.SKIPPED, "lost-race")
    expected = {"finishes": "RunTerminal", "holds": "LeaseHeld"}[winner]
    assert (outcome.detail or "").startswith(expected)
    record = h.store.load_run("r")
    assert record is not None and record.attempt == 2  # one takeover, not two
    assert record.status is {"finishes": RunStatus.COMPLETED,
                             "holds": RunStatus.RUNNING}[winner]


def test_a_run_whose_runtime_cannot_be_built_is_an_error_and_the_pass_goes_on() -> None:
    h = Harness(three_step_model())
    stranded(h, "broken", DEAD)
    stranded(h, "fine", DEAD)

    def runtime_for(run: RunRecord) -> AgentRuntime:
        if run.run_id == "broken":
            raise ConfigError("config file not found", source="/gone/config.yaml")
        return h.make_runtime(owner="host-r:1")

    summary = reconciler(h, runtime_for=runtime_for).reconcile_sync()
    outcomes = by_run(summary)
    assert outcomes["broken"].action is Action.ERROR
    assert "config file not found" in (outcomes["broken"].detail or "")
    assert outcomes["fine"].status is RunStatus.COMPLETED
    assert summary.errors == 1
    broken = h.store.load_run("broken")
    assert broken is not None and broken.status is RunStatus.RUNNING  # left for the next pass
    error = next(e for e in h.events.events if e.type == "reconcile.error")
    assert (error.run_id, error.data["error_type"]) == ("broken", "ConfigError")


def test_a_pass_pages_through_every_candidate() -> None:
    h = Harness(scripted())
    for index in range(5):
        stranded(h, f"r{index}", ALIVE)
    summary = reconciler(h, page_size=2).reconcile_sync()
    assert [o.run_id for o in summary.outcomes] == [f"r{i}" for i in range(5)]
    completed = next(e for e in h.events.events if e.type == "reconcile.completed")
    assert completed.data["counts"]["skipped"] == 5


def test_summary_json_has_counts_and_per_run_outcomes() -> None:
    h = Harness(three_step_model())
    stranded(h, "a", DEAD)
    stranded(h, "b", ALIVE)
    body = reconciler(h).reconcile_sync().to_json()
    assert body["counts"] == {"candidates": 2, "resumed": 1, "skipped": 1, "suspended_runs": 0,
                              "errors": 0}
    assert body["runs"][0] == {"run_id": "a", "action": "resumed", "attempt": 2,
                               "status": "completed", "takeovers": 1}
    assert body["runs"][1]["reason"] == "owner-alive"
    assert body["reconcile_id"].startswith("reconcile_")


# -- ProcessLiveness: the local engine's owners, host:pid --------------------------


def running(owner: str) -> RunRecord:
    return RunRecord(run_id="r", manifest_hash="h", status=RunStatus.RUNNING, attempt=1,
                     lease_owner=owner)


def exited_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid is free
    return child.pid


def test_process_liveness_on_this_host() -> None:
    check = ProcessLiveness(host="host-a")
    assert check(running(f"host-a:{os.getpid()}")).liveness is Liveness.ALIVE
    gone = check(running(f"host-a:{exited_pid()}"))
    assert gone.liveness is Liveness.GONE and "no longer exists" in gone.detail


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_an_exited_owner_not_yet_collected_by_its_parent_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        stat = Path(f"/proc/{child.pid}/stat")
        for _ in range(500):  # until it exits; not waited for, it stays a zombie
            if stat.read_text().rpartition(")")[2].split()[0] == "Z":
                break
            time.sleep(0.01)
        verdict = ProcessLiveness(host="host-a")(running(f"host-a:{child.pid}"))
        assert verdict.liveness is Liveness.GONE and "zombie" in verdict.detail
    finally:
        child.wait()


@pytest.mark.parametrize(("owner", "why"), [
    ("host-b:123", "not this host"),
    ("test-owner", "not host:pid"),
    ("host-a:", "not host:pid"),
    ("host-a:0", "not host:pid"),
    (":123", "not host:pid"),
    ("", "not host:pid"),
    # A Step Functions execution owns the run: its ARN names no local process.
    ("arn:aws:states:us-east-1:123456789012:execution:run:r-a1", "not host:pid"),
])
def test_owners_this_host_cannot_see_are_unknown(owner: str, why: str) -> None:
    verdict = ProcessLiveness(host="host-a")(running(owner))
    assert verdict.liveness is Liveness.UNKNOWN
    assert why in verdict.detail


def test_a_host_name_with_colons_is_split_at_the_last_one() -> None:
    verdict = ProcessLiveness(host="fe80::1")(running(f"fe80::1:{os.getpid()}"))
    assert verdict.liveness is Liveness.ALIVE


def test_a_resume_action_can_hand_the_run_to_another_executor() -> None:
    """The AWS reconciler's action: start an execution elsewhere instead of resuming here."""
    h = Harness(three_step_model())
    stranded(h, "handed", DEAD)
    stranded(h, "taken", DEAD)
    handed: list[tuple[str, int, RunStatus]] = []

    async def start_elsewhere(run: RunRecord) -> Resumed:
        if run.run_id == "taken":
            raise LostRace("its execution was already started")
        handed.append((run.run_id, run.attempt, run.status))
        return Resumed(run.attempt + 1, None, detail="execution handed-a2")

    summary = reconciler(h, resume=start_elsewhere).reconcile_sync()
    outcomes = by_run(summary)
    assert handed == [("handed", 1, RunStatus.RUNNING)]
    assert outcomes["handed"].action is Action.RESUMED and outcomes["handed"].status is None
    assert (outcomes["handed"].attempt, outcomes["handed"].detail) == (2, "execution handed-a2")
    assert outcomes["taken"].action is Action.SKIPPED and outcomes["taken"].reason == "lost-race"
    resumed = next(e for e in h.events.events if e.type == "reconcile.resumed")
    assert "status" not in resumed.data and resumed.data["detail"] == "execution handed-a2"
    record = h.store.load_run("handed")
    assert record is not None and record.status is RunStatus.RUNNING and record.attempt == 1


# -- the resume outbox ---------------------------------------------------------

APPROVAL_AGENT = manifest({"id": "confirm", "type": "approval", "prompt": "Go?"},
                          {"id": "after", "type": "prompt", "prompt": "a",
                           "includeInFinalOutput": True})
SUB_RUN_AGENT = manifest(
    {"id": "delegate", "type": "sub-run", "manifest": {
        "schemaVersion": "1.0", "id": "child", "variables": [],
        "steps": [{"id": "confirm", "type": "approval", "prompt": "Go?"},
                  {"id": "after", "type": "prompt", "prompt": "a"}]}},
    {"id": "finish", "type": "prompt", "prompt": "f", "includeInFinalOutput": True})


def test_an_approved_run_nobody_resumed_is_resumed_once_the_grace_is_over() -> None:
    h = Harness(scripted(by_step={"after": [{"text": "done"}]}))
    run = h.run(APPROVAL_AGENT, run_id="approved")
    h.runtime.approve(run.run_id)  # recorded; the resume that should follow never came
    rec = reconciler(h, resume_grace=30)
    h.clock.advance(10)
    assert rec.reconcile_sync().outcomes == []  # the request's own resume may still come
    h.clock.advance(21)
    outcome = by_run(rec.reconcile_sync())["approved"]
    assert (outcome.action, outcome.reason, outcome.status) == (
        Action.RESUMED, RESUME_REQUESTED, RunStatus.COMPLETED)
    record = h.store.load_run("approved")
    assert record is not None and record.output == "done"
    assert record.resume_requested_at is None  # served: out of the outbox
    resumed = next(e for e in h.events.events if e.type == "reconcile.resumed")
    assert (resumed.data["reason"], resumed.data["from_status"]) == (RESUME_REQUESTED,
                                                                     "suspended")
    assert rec.reconcile_sync().outcomes == []


def test_a_run_suspended_without_a_request_is_left_alone() -> None:
    h = Harness()
    h.run(APPROVAL_AGENT, run_id="waiting")
    h.clock.advance(3600)
    assert reconciler(h).reconcile_sync().outcomes == []


def test_a_sub_run_family_is_finished_by_the_reconciler_alone() -> None:
    h = Harness(scripted(by_step={"after": [{"text": "a"}], "finish": [{"text": "done"}]}))
    parent = h.run(SUB_RUN_AGENT, run_id="parent")
    child_id = child_run_id_for(parent.run_id, "delegate")
    h.runtime.approve(child_id)  # the child's request; nobody resumes it, nor the parent
    rec = reconciler(h, resume_grace=30)
    h.clock.advance(31)
    first = by_run(rec.reconcile_sync())
    # The child goes on; the parent waits until the child's end is older than the grace.
    assert list(first) == [child_id]
    assert (first[child_id].reason, first[child_id].status) == (RESUME_REQUESTED,
                                                                RunStatus.COMPLETED)
    record = h.store.load_run("parent")
    assert record is not None and record.status is RunStatus.SUSPENDED
    # The child's end filed the parent's request, in the store: nothing else told it.
    assert (record.resume_requested_at, record.resume_reason) == (h.clock.now(),
                                                                  "sub-run-finished")
    h.clock.advance(31)
    second = by_run(rec.reconcile_sync())
    assert list(second) == ["parent"]
    assert (second["parent"].reason, second["parent"].status) == (CHILD_FINISHED,
                                                                  RunStatus.COMPLETED)
    record = h.store.load_run("parent")
    assert record is not None and record.output == "done"


def test_a_sub_run_parent_whose_child_still_waits_is_left_alone() -> None:
    h = Harness()
    h.run(SUB_RUN_AGENT, run_id="parent")
    h.clock.advance(3600)
    assert reconciler(h).reconcile_sync().outcomes == []


def test_a_parent_with_a_request_and_a_finished_child_is_resumed_once() -> None:
    h = Harness(scripted(by_step={"after": [{"text": "a"}], "finish": [{"text": "done"}]}))
    h.run(SUB_RUN_AGENT, run_id="parent")
    child_id = child_run_id_for("parent", "delegate")
    h.runtime.approve(child_id)
    h.resume(child_id)
    # What the AWS step function also files: the earlier request, the child's end's, stands.
    h.store.request_resume("parent", at=h.clock.now(), reason="sub-run-finished")
    h.clock.advance(31)
    summary = reconciler(h).reconcile_sync()
    assert [(o.run_id, o.reason) for o in summary.outcomes] == [("parent", CHILD_FINISHED)]
    assert h.store.load_run("parent").status is RunStatus.COMPLETED  # type: ignore[union-attr]


# -- crash loops count takeovers without progress ------------------------------


class DiesAfterReserving:
    """A ResumeAction whose new owner reserves, saves `checkpoints` checkpoints, and dies."""

    def __init__(self, h: Harness, checkpoints: int) -> None:
        self.h = h
        self.checkpoints = checkpoints

    async def __call__(self, run: RunRecord) -> Resumed:
        store = self.h.store
        record = store.resume_run(run.run_id, owner=DEAD, now=self.h.clock.now(),
                                  lease_seconds=30, allow_running_takeover=True)
        for _ in range(self.checkpoints):
            latest = store.load_run(run.run_id)
            assert latest is not None
            store.save_checkpoint(Checkpoint(run_id=run.run_id,
                                             seq=(latest.checkpoint_seq or 0) + 1,
                                             attempt=record.attempt,
                                             manifest_hash=record.manifest_hash),
                                  expected_attempt=record.attempt)
        return Resumed(record.attempt, None, "died")


def test_takeovers_each_followed_by_progress_never_fail_the_run() -> None:
    h = Harness()
    stranded(h, "r", DEAD)
    rec = reconciler(h, resume=DiesAfterReserving(h, checkpoints=1), max_takeovers=3)
    for _ in range(5):
        outcome = by_run(rec.reconcile_sync())["r"]
        assert outcome.action is Action.RESUMED
        record = h.store.load_run("r")
        assert record is not None and record.takeovers == 0  # the checkpoint reset it
        h.clock.advance(31)
    record = h.store.load_run("r")
    assert record is not None and (record.status, record.attempt) == (RunStatus.RUNNING, 6)

    # Then three takeovers in a row without a checkpoint: the next death fails it.
    rec.resume = DiesAfterReserving(h, checkpoints=0)
    for takeovers in (1, 2, 3):
        assert by_run(rec.reconcile_sync())["r"].action is Action.RESUMED
        assert h.store.load_run("r").takeovers == takeovers  # type: ignore[union-attr]
        h.clock.advance(31)
    outcome = by_run(rec.reconcile_sync())["r"]
    assert (outcome.action, outcome.takeovers) == (Action.SUSPENDED_RUN, 3)
    record = h.store.load_run("r")
    assert record is not None and record.suspension is not None
    assert (record.status, record.suspension.reason) == (RunStatus.SUSPENDED, "crash-loop")
    assert "in a row without saving a checkpoint" in record.suspension.details["message"]
