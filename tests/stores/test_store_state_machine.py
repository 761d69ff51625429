"""Random operation sequences on every store, checked against a plain model of the contract.

`Model` is written from the documented rules (docs/design.md section 5 and the
docstrings of `stores/base.py`), independently of `stores/transitions.py`, with
small dicts: a rule the shared transitions and a backend both got wrong the same
way still disagrees with it. After every step the store and the model must
agree on the outcome (the same error type, or success) and on everything a
caller can observe of each run.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from stores.base import (
    ApprovalConflict,
    CheckpointConflict,
    InvalidTransition,
    LeaseHeld,
    RunAlreadyExists,
    RunNotFound,
    RunStore,
    RunTerminal,
    StaleAttempt,
    StoreError,
)
from stores.conformance import NOW, make_checkpoint, make_run
from stores.file import FileRunStore
from stores.memory import MemoryRunStore
from stores.records import Checkpoint, RunError
from stores.sqlite import SqliteRunStore

SETTINGS = settings(max_examples=100, stateful_step_count=50, deadline=None)

# Time moves in whole seconds and leases last a fraction more, so a lease never
# expires exactly "now" (the one instant the documents leave open).
LEASE_SECONDS = 30.5
RUN_IDS = ("run-a", "run-b", "run-c")  # run-c starts missing and is drawn less often
APPROVAL_IDS = ("approval-1", "approval-2")
EFFECT_KEYS = ("effect-1", "effect-2")
UNKNOWN_EFFECTS = ("call-1",)  # keys of effects a run suspends on, its outcome unknown
# What a suspended run waits on: the detail that names the question, by reason.
QUESTION = {"approval": "approval_id", "effect-unknown": "key"}
OUTPUTS: tuple[Any, ...] = ("done", {"answer": 2}, None)
ERRORS = (RunError(type="boom", message="it broke"), RunError(type="timeout", message="slow"))
ENDINGS: list[tuple[str, Any]] = [
    *(("complete_run", output) for output in OUTPUTS), *(("fail_run", error) for error in ERRORS),
    ("cancel_run", "fenced"), ("cancel_run", "unfenced")]
TERMINAL = {"completed", "failed", "cancelled"}
# How a checkpoint's seq is chosen: the next one, an identical re-save of a stored
# one, a different checkpoint at a used seq, or one seq too far.
SEQ_CHOICES = ("next", "next", "resave", "rewrite", "skip")
# How its transcript relates to the previous one: appended to, cut short, or the
# first entry changed with one entry more (a list that is longer, yet no extension).
LIST_CHOICES = ("extend", "extend", "shorten", "change")

T = TypeVar("T")
Content = dict[str, Any]  # a checkpoint without created_at, as JSON


def same_json(left: Any, right: Any) -> bool:
    return json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True)


def content_of(checkpoint: Checkpoint) -> Content:
    return checkpoint.model_dump(mode="json", exclude={"created_at"})


@dataclass
class ModelRun:
    status: str = "created"
    attempt: int = 0
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    suspension: dict[str, Any] | None = None  # reason, details, answer
    requested: tuple[datetime, str] | None = None  # the pending resume request
    output: Any = None
    error: RunError | None = None
    checkpoints: list[Content] = field(default_factory=list)  # seq n at index n - 1
    answers: dict[str, tuple[bool, Any]] = field(default_factory=dict)
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)  # attempt, status, result


class Model:
    """The contract as plain rules: each method raises the documented error before
    changing anything, or applies the change."""

    def __init__(self) -> None:
        self.runs: dict[str, ModelRun] = {}

    def _run(self, run_id: str) -> ModelRun:
        if run_id not in self.runs:
            raise RunNotFound(run_id)
        return self.runs[run_id]

    @staticmethod
    def _fence(run: ModelRun, expected_attempt: int) -> None:
        if run.attempt != expected_attempt:
            raise StaleAttempt("the model")

    @staticmethod
    def _must_run(run: ModelRun) -> None:
        if run.status in TERMINAL:
            raise RunTerminal("the model")
        if run.status != "running":
            raise InvalidTransition("the model")

    @staticmethod
    def _stored(run: ModelRun, seq: int) -> Content | None:
        return run.checkpoints[seq - 1] if 1 <= seq <= len(run.checkpoints) else None

    def _is_new(self, run: ModelRun, checkpoint: Content) -> bool:
        """True to append; False for an identical re-save; CheckpointConflict otherwise."""
        if self._stored(run, checkpoint["seq"]) == checkpoint:
            return False
        if checkpoint["seq"] != len(run.checkpoints) + 1:
            raise CheckpointConflict("the model")
        return True

    @staticmethod
    def _release(run: ModelRun) -> None:
        run.lease_owner = run.lease_expires_at = None

    def create(self, run_id: str) -> None:
        if run_id in self.runs:
            raise RunAlreadyExists("the model")
        self.runs[run_id] = ModelRun()

    def resume(self, run_id: str, *, owner: str, now: datetime, takeover: bool) -> None:
        run = self._run(run_id)
        if run.status in TERMINAL:
            raise RunTerminal("the model")
        if run.status == "running" and (
                not takeover or run.lease_expires_at is None or run.lease_expires_at > now):
            raise LeaseHeld("the model")
        run.status, run.attempt, run.lease_owner = "running", run.attempt + 1, owner
        run.lease_expires_at = now + timedelta(seconds=LEASE_SECONDS)
        run.requested = None

    def renew(self, run_id: str, *, expected_attempt: int, now: datetime) -> None:
        run = self._run(run_id)
        self._fence(run, expected_attempt)
        self._must_run(run)
        run.lease_expires_at = now + timedelta(seconds=LEASE_SECONDS)

    def save(self, checkpoint: Content, *, expected_attempt: int,
             lease_expires_at: datetime | None) -> None:
        run = self._run(checkpoint["run_id"])
        self._fence(run, expected_attempt)
        self._must_run(run)
        if self._is_new(run, checkpoint):
            run.checkpoints.append(checkpoint)
            if lease_expires_at is not None:
                run.lease_expires_at = lease_expires_at

    def suspend(self, run_id: str, *, expected_attempt: int, reason: str,
                details: dict[str, Any], checkpoint: Content | None) -> None:
        run = self._run(run_id)
        self._fence(run, expected_attempt)
        self._must_run(run)
        if checkpoint is not None and self._is_new(run, checkpoint):
            run.checkpoints.append(checkpoint)
        run.status = "suspended"
        run.suspension = {"reason": reason, "details": details, "answer": None}
        self._release(run)

    def finish(self, run_id: str, *, status: str, expected_attempt: int, output: Any = None,
               error: RunError | None = None, checkpoint: Content | None = None) -> None:
        run = self._run(run_id)
        self._fence(run, expected_attempt)
        if run.status in TERMINAL:
            same = run.status == status and (
                same_json(run.output, output) if status == "completed" else run.error == error)
            if same and (checkpoint is None or self._stored(run, checkpoint["seq"]) == checkpoint):
                return
            raise RunTerminal("the model")
        if status == "completed" and run.status != "running":
            raise InvalidTransition("the model")
        if checkpoint is not None and self._is_new(run, checkpoint):
            run.checkpoints.append(checkpoint)
        run.status, run.output, run.error = status, output, error
        run.requested = None
        self._release(run)

    def cancel(self, run_id: str, *, expected_attempt: int | None) -> None:
        run = self._run(run_id)
        if expected_attempt is not None:
            self._fence(run, expected_attempt)
        if run.status == "cancelled":
            return
        if run.status in TERMINAL:
            raise RunTerminal("the model")
        run.status = "cancelled"
        run.requested = None
        self._release(run)

    def resolve(self, run_id: str, approval_id: str, *, approved: bool, response: Any,
                at: datetime) -> None:
        run = self._run(run_id)
        if run.status in TERMINAL:
            raise RunTerminal("the model")
        if approval_id in run.answers:
            answered, said = run.answers[approval_id]
            if answered == approved and same_json(said, response):
                return
            raise ApprovalConflict("the model")
        waiting = run.suspension
        if (run.status != "suspended" or waiting is None or waiting["reason"] not in QUESTION
                or waiting["details"].get(QUESTION[waiting["reason"]]) != approval_id):
            raise InvalidTransition("the model")
        run.answers[approval_id] = waiting["answer"] = (approved, response)
        self._ask(run, at, "approval-recorded")

    @staticmethod
    def _ask(run: ModelRun, at: datetime, reason: str) -> None:
        """The earliest pending request stands."""
        if run.requested is None or at < run.requested[0]:
            run.requested = (at, reason)

    def request_resume(self, run_id: str, *, at: datetime, reason: str) -> None:
        run = self._run(run_id)
        if run.status in TERMINAL:
            raise RunTerminal("the model")
        if run.status != "suspended":
            raise InvalidTransition("the model")
        self._ask(run, at, reason)

    def begin_effect(self, key: str, *, run_id: str, expected_attempt: int) -> dict[str, Any]:
        run = self._run(run_id)
        self._fence(run, expected_attempt)
        self._must_run(run)
        effect = run.effects.setdefault(
            key, {"attempt": expected_attempt, "status": "reserved", "result": None})
        return dict(effect)

    def complete_effect(self, key: str, *, run_id: str, expected_attempt: int,
                        result: Any) -> None:
        run = self._run(run_id)
        self._fence(run, expected_attempt)
        self._must_run(run)
        effect = run.effects.get(key)
        if effect is None:
            raise InvalidTransition("the model")
        if effect["status"] == "completed":
            if same_json(effect["result"], result):
                return
            raise InvalidTransition("the model")
        effect.update(status="completed", result=result)

    def delete(self, run_id: str) -> None:
        run = self.runs.get(run_id)
        if run is None:
            return
        if run.status not in TERMINAL:
            raise InvalidTransition("the model")
        del self.runs[run_id]


run_ids = st.sampled_from(["run-a", "run-b", "run-a", "run-b", "run-c"])
# expected_attempt relative to the model's current attempt: mostly current, sometimes stale.
offsets = st.sampled_from([0, 0, 0, 0, 0, 0, 0, 0, -1, 1])
plans = st.tuples(st.sampled_from(SEQ_CHOICES), st.integers(0, 50), st.sampled_from(LIST_CHOICES))
maybe_plans = st.none() | plans


class StoreMachine(RuleBasedStateMachine):
    """Drives one store and the model with the same calls. Subclasses set `open_store`."""

    open_store: Callable[[Path], RunStore]

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="store-machine-"))
        self.store = self.open_store(self.directory)
        self.model = Model()
        self.now = NOW
        self.turn = 0

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- helpers ----------------------------------------------------------------

    def agree(self, operation: str, on_store: Callable[[], T],
              on_model: Callable[[], Any]) -> T | None:
        """Run both; they must fail with the same error type or both succeed."""
        expected: type[StoreError] | None = None
        actual: type[StoreError] | None = None
        try:
            on_model()
        except StoreError as error:
            expected = type(error)
        result: T | None = None
        try:
            result = on_store()
        except StoreError as error:
            actual = type(error)
        assert actual is expected, (
            f"{operation}: the store {'raised ' + actual.__name__ if actual else 'succeeded'}, "
            f"the contract says {'raise ' + expected.__name__ if expected else 'succeed'}")
        return result

    def attempt(self, run_id: str, offset: int) -> int:
        run = self.model.runs.get(run_id)
        return (run.attempt if run else 1) + offset

    def checkpoint(self, run_id: str, attempt: int,
                   plan: tuple[str, int, str] | None) -> Checkpoint | None:
        """A checkpoint chosen by `plan`: a seq choice, a pick, a list choice."""
        if plan is None:
            return None
        choice, pick, lists = plan
        run = self.model.runs.get(run_id)
        stored = run.checkpoints if run else []
        if choice in ("resave", "rewrite") and stored:
            content = stored[pick % len(stored)]
            if choice == "rewrite":
                content = {**content, "variables": {"rewritten": pick}}
            return Checkpoint.model_validate({**content, "created_at": self.now})
        self.turn += 1
        previous: list[Any] = stored[-1]["transcript"] if stored else []
        kept = previous[: pick % (len(previous) + 1)] if lists == "shorten" else previous
        if lists == "change" and kept:
            kept = [{"role": "user", "content": f"rewritten at turn {self.turn}"}, *kept[1:]]
        seq = len(stored) + (2 if choice == "skip" else 1)
        return make_checkpoint(run_id, seq, attempt, created_at=self.now,
                               variables={"turn": self.turn},
                               transcript=[*kept, {"role": "assistant", "turn": self.turn}])

    # -- rules ------------------------------------------------------------------

    @initialize()
    def create_every_run(self) -> None:
        """Start with two runs, one of them running, so most steps reach a live run."""
        for run_id in RUN_IDS[:2]:
            self.create_run(run_id)
        self.reserve(RUN_IDS[0], takeover=False)

    @rule(seconds=st.integers(1, 40))
    def advance_time(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(run_id=run_ids)
    def create_run(self, run_id: str) -> None:
        record = make_run(run_id, created_at=self.now, updated_at=self.now)
        self.agree("create_run", lambda: self.store.create_run(record),
                   lambda: self.model.create(run_id))

    def reserve(self, run_id: str, takeover: bool) -> None:
        self.turn += 1
        owner = f"owner-{self.turn}"
        record = self.agree(
            "resume_run",
            lambda: self.store.resume_run(run_id, owner=owner, now=self.now,
                                          lease_seconds=LEASE_SECONDS,
                                          allow_running_takeover=takeover),
            lambda: self.model.resume(run_id, owner=owner, now=self.now, takeover=takeover))
        if record is not None:
            self.check_run(run_id, record)

    # Two rules, so a reservation is drawn twice as often as any single other write.
    @rule(run_id=run_ids)
    def resume_run(self, run_id: str) -> None:
        self.reserve(run_id, takeover=False)

    @rule(run_id=run_ids)
    def resume_run_with_takeover(self, run_id: str) -> None:
        self.reserve(run_id, takeover=True)

    @rule(run_id=run_ids, offset=offsets)
    def renew_lease(self, run_id: str, offset: int) -> None:
        attempt = self.attempt(run_id, offset)
        self.agree("renew_lease",
                   lambda: self.store.renew_lease(run_id, expected_attempt=attempt, now=self.now,
                                                  lease_seconds=LEASE_SECONDS),
                   lambda: self.model.renew(run_id, expected_attempt=attempt, now=self.now))

    # Two rules: checkpoints are the most frequent write of a real run.
    @rule(run_id=run_ids, offset=offsets, plan=plans)
    def save_checkpoint(self, run_id: str, offset: int, plan: tuple[str, int, str]) -> None:
        self.save(run_id, offset, plan, renew=False)

    @rule(run_id=run_ids, offset=offsets, plan=plans)
    def save_checkpoint_renewing_the_lease(self, run_id: str, offset: int,
                                           plan: tuple[str, int, str]) -> None:
        self.save(run_id, offset, plan, renew=True)

    def save(self, run_id: str, offset: int, plan: tuple[str, int, str], *, renew: bool) -> None:
        attempt = self.attempt(run_id, offset)
        checkpoint = self.checkpoint(run_id, attempt, plan)
        assert checkpoint is not None
        lease = self.now + timedelta(seconds=LEASE_SECONDS) if renew else None
        self.agree("save_checkpoint",
                   lambda: self.store.save_checkpoint(checkpoint, expected_attempt=attempt,
                                                      lease_expires_at=lease),
                   lambda: self.model.save(content_of(checkpoint), expected_attempt=attempt,
                                           lease_expires_at=lease))

    @rule(run_id=run_ids, offset=offsets, plan=maybe_plans,
          reason=st.sampled_from([*APPROVAL_IDS, *UNKNOWN_EFFECTS, "sub-run"]))
    def suspend_run(self, run_id: str, offset: int, plan: tuple[str, int, str] | None,
                    reason: str) -> None:
        attempt = self.attempt(run_id, offset)
        checkpoint = self.checkpoint(run_id, attempt, plan)
        details: dict[str, Any] = {"child_run_id": "c"}
        kind = reason
        if reason in APPROVAL_IDS:
            kind, details = "approval", {"approval_id": reason}
        elif reason in UNKNOWN_EFFECTS:
            kind, details = "effect-unknown", {"key": reason, "tool": "delete"}
        self.agree(
            "suspend_run",
            lambda: self.store.suspend_run(run_id, expected_attempt=attempt, reason=kind,
                                           details=details, at=self.now, checkpoint=checkpoint),
            lambda: self.model.suspend(run_id, expected_attempt=attempt, reason=kind,
                                       details=details,
                                       checkpoint=checkpoint and content_of(checkpoint)))

    @rule(run_id=run_ids, offset=offsets, plan=maybe_plans, ending=st.sampled_from(ENDINGS))
    def end_run(self, run_id: str, offset: int, plan: tuple[str, int, str] | None,
                ending: tuple[str, Any]) -> None:
        """complete_run, fail_run or cancel_run: one rule, so runs are not ended too often."""
        kind, value = ending
        attempt = self.attempt(run_id, offset)
        if kind == "cancel_run":
            fence = attempt if value == "fenced" else None
            self.agree("cancel_run",
                       lambda: self.store.cancel_run(run_id, at=self.now, expected_attempt=fence),
                       lambda: self.model.cancel(run_id, expected_attempt=fence))
            return
        checkpoint = self.checkpoint(run_id, attempt, plan)
        content = checkpoint and content_of(checkpoint)
        if kind == "fail_run":
            self.agree(
                "fail_run",
                lambda: self.store.fail_run(run_id, expected_attempt=attempt, error=value,
                                            at=self.now, checkpoint=checkpoint),
                lambda: self.model.finish(run_id, status="failed", expected_attempt=attempt,
                                          error=value, checkpoint=content))
        else:
            self.agree(
                "complete_run",
                lambda: self.store.complete_run(run_id, expected_attempt=attempt, output=value,
                                                at=self.now, checkpoint=checkpoint),
                lambda: self.model.finish(run_id, status="completed", expected_attempt=attempt,
                                          output=value, checkpoint=content))

    @rule(run_id=run_ids, approval_id=st.sampled_from([None, *APPROVAL_IDS, *UNKNOWN_EFFECTS]),
          approved=st.booleans(), response=st.sampled_from([None, "ok", {"action": "retry"}]))
    def resolve_approval(self, run_id: str, approval_id: str | None, approved: bool,
                         response: Any) -> None:
        if approval_id is None:  # the question the run waits on, when it waits on one
            waiting = self.model.runs[run_id].suspension if run_id in self.model.runs else None
            details = (waiting or {}).get("details", {})
            approval_id = details.get("approval_id", details.get("key", APPROVAL_IDS[0]))
        self.agree(
            "resolve_approval",
            lambda: self.store.resolve_approval(run_id, approval_id, approved=approved,
                                                response=response, responded_by="tester",
                                                at=self.now),
            lambda: self.model.resolve(run_id, approval_id, approved=approved,
                                       response=response, at=self.now))

    @rule(run_id=run_ids, seconds=st.integers(-5, 5),
          reason=st.sampled_from(["sub-run-finished", "asked"]))
    def request_resume(self, run_id: str, seconds: int, reason: str) -> None:
        """Requests at times around now: a later one must never move the pending one."""
        at = self.now + timedelta(seconds=seconds)
        self.agree("request_resume",
                   lambda: self.store.request_resume(run_id, at=at, reason=reason),
                   lambda: self.model.request_resume(run_id, at=at, reason=reason))

    @rule(run_id=run_ids, key=st.sampled_from(EFFECT_KEYS), offset=offsets)
    def begin_effect(self, run_id: str, key: str, offset: int) -> None:
        attempt = self.attempt(run_id, offset)
        expected: dict[str, Any] = {}
        effect = self.agree(
            "begin_effect",
            lambda: self.store.begin_effect(key, run_id=run_id, expected_attempt=attempt,
                                            at=self.now),
            lambda: expected.update(self.model.begin_effect(key, run_id=run_id,
                                                            expected_attempt=attempt)))
        if effect is not None:
            seen = {"attempt": effect.attempt, "status": effect.status.value,
                    "result": effect.result}
            assert (effect.key, effect.run_id, seen) == (key, run_id, expected)

    @rule(run_id=run_ids, key=st.sampled_from(EFFECT_KEYS), offset=offsets,
          result=st.sampled_from([1, "two"]))
    def complete_effect(self, run_id: str, key: str, offset: int, result: Any) -> None:
        attempt = self.attempt(run_id, offset)
        self.agree("complete_effect",
                   lambda: self.store.complete_effect(key, run_id=run_id, expected_attempt=attempt,
                                                      result=result, at=self.now),
                   lambda: self.model.complete_effect(key, run_id=run_id,
                                                      expected_attempt=attempt, result=result))

    @rule(run_id=run_ids, recreate=st.booleans())
    def delete_run(self, run_id: str, recreate: bool) -> None:
        """Delete, and often create the id again at once, so runs are seldom stuck finished."""
        self.agree("delete_run", lambda: self.store.delete_run(run_id),
                   lambda: self.model.delete(run_id))
        if recreate and run_id not in self.model.runs:
            self.create_run(run_id)

    # -- what a caller observes ---------------------------------------------------

    def check_run(self, run_id: str, record: Any) -> None:
        expected = self.model.runs[run_id]
        assert (record.status.value, record.attempt) == (expected.status, expected.attempt)
        if expected.status == "running":
            assert (record.lease_owner, record.lease_expires_at) == (
                expected.lease_owner, expected.lease_expires_at)
        if expected.status == "suspended":
            assert record.lease_expires_at is None
        if expected.status in ("running", "suspended"):
            waiting = expected.suspension
            if waiting is None:
                assert record.suspension is None
            else:
                assert record.suspension is not None
                assert (record.suspension.reason, record.suspension.details) == (
                    waiting["reason"], waiting["details"])
                decision = record.suspension.decision
                answer = None if decision is None else (decision["approved"],
                                                        decision["response"])
                assert answer == waiting["answer"]
        assert (record.resume_requested_at, record.resume_reason) == (
            expected.requested or (None, None))
        if expected.status == "completed":
            assert same_json(record.output, expected.output)
        if expected.status == "failed":
            assert record.error == expected.error

    @invariant()
    def the_outbox_lists_the_pending_requests(self) -> None:
        before = self.now + timedelta(seconds=1)
        listed = [run.run_id for run in
                  self.store.list_runs(resume_requested_before=before).runs]
        assert listed == sorted(
            run_id for run_id, run in self.model.runs.items()
            if run.status == "suspended" and run.requested and run.requested[0] < before)

    @invariant()
    def store_and_model_agree(self) -> None:
        for run_id in RUN_IDS:
            expected = self.model.runs.get(run_id)
            record = self.store.load_run(run_id)
            if expected is None:
                assert record is None
                assert self.store.load_latest_checkpoint(run_id) is None
                continue
            assert record is not None
            self.check_run(run_id, record)
            latest = self.store.load_latest_checkpoint(run_id)
            assert (latest and content_of(latest)) == (
                expected.checkpoints[-1] if expected.checkpoints else None)
            infos = self.store.list_checkpoints(run_id)
            assert [info.seq for info in infos] == list(range(1, len(expected.checkpoints) + 1))
            for seq, content in enumerate(expected.checkpoints, start=1):
                loaded = self.store.load_checkpoint(run_id, seq)
                assert loaded is not None and content_of(loaded) == content


BACKENDS: dict[str, Callable[[Path], RunStore]] = {
    "memory": lambda directory: MemoryRunStore(),
    "sqlite": lambda directory: SqliteRunStore(directory / "runs.sqlite"),
    "file": lambda directory: FileRunStore(directory / "runs"),
}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_store_agrees_with_the_contract_model(backend: str) -> None:
    machine = type(f"{backend.title()}StoreMachine", (StoreMachine,),
                   {"open_store": staticmethod(BACKENDS[backend])})
    run_state_machine_as_test(machine, settings=SETTINGS)
