"""A crash kit for authors of step kinds and stores: kill a run at every commit point.

    reference, trials = crash_at_every_commit(
        manifest, runtime=lambda store, owner: AgentRuntime(store=store, owner=owner, ...),
        clock=clock, options={"model": "scripted/echo"},
        settle=lambda runtime, run_id: ...)   # answers an approval, say, then resumes
    assert_crash_safe(reference, trials)

The reference is the run uninterrupted on a fresh `MemoryRunStore`, every
commit it makes counted (a checkpoint, a suspension, the end, an effect's
start and its result). Then, for each commit N, the run starts again on a
fresh store whose process dies right after commit N has returned
(`DyingStore`, raising `ProcessDied`): the commit is durable, nothing after
it happened. A new runtime under another owner takes the run over (its
lease is let lapse on `clock`) and carries it on to its end, `settle`
answering any suspension the same way it did for the reference. Each
trial's end must be the reference's: the same status and output, and no
step run again that a commit had finished (the store's contract and the
kind's continuation make it so, or the trial says where they did not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stores.memory import MemoryRunStore
from stores.records import RunStatus

if TYPE_CHECKING:
    from stores.base import RunStore

    from agent_runtime.engine import AgentRuntime
    from agent_runtime.manifest import AgentManifest
    from agent_runtime.results import RunResult
    from agent_runtime.testing import FakeClock

# The store calls that commit: each is a point where a process may die after it.
COMMITS = frozenset({"save_checkpoint", "save_checkpoint_settling", "suspend_run",
                     "complete_run", "fail_run", "begin_effect", "complete_effect"})

RuntimeFactory = Callable[["RunStore", str], "AgentRuntime"]
Settle = Callable[["AgentRuntime", str], "RunResult"]


class ProcessDied(BaseException):
    """The process running the run died here (a BaseException: nothing catches it)."""


class DyingStore:
    """The store as one process sees it: the process dies right after its `after`th
    commit returns (0: never), and makes no call after that.

    Every call goes to `inner` as it is. `commits` counts the commits made.
    """

    def __init__(self, inner: RunStore, *, after: int = 0) -> None:
        self.inner = inner
        self.after = after
        self.commits = 0
        self.died = False

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if name not in COMMITS or not callable(value):
            return value

        def commit(*args: Any, **kwargs: Any) -> Any:
            if self.died:
                raise ProcessDied(f"the process died after commit {self.after}")
            answer = value(*args, **kwargs)
            self.commits += 1
            if self.commits == self.after:
                self.died = True
                raise ProcessDied(f"the process died after commit {self.after} ({name})")
            return answer
        return commit


@dataclass(frozen=True)
class CrashTrial:
    """One run to its end: the commit its first process died after (0: none died),
    how it ended, and what its last checkpoint records."""

    commit: int
    result: RunResult
    # (step path, status) of each step result, in the order they were made: a
    # step run again after a commit had recorded it shows up twice.
    steps: tuple[tuple[str, str], ...]
    # Tokens consumed and model requests made, as the last checkpoint counts them.
    spent: tuple[int, int]

    def outcome(self) -> tuple[object, ...]:
        """What a crash must not change: the status, the output, the steps run and
        what they spent (a model request made twice is spent twice)."""
        return (self.result.status, self.result.output, self.steps, self.spent)


def crash_at_every_commit(manifest: AgentManifest, *, runtime: RuntimeFactory,
                          clock: FakeClock, options: dict[str, Any] | None = None,
                          variables: dict[str, Any] | None = None,
                          settle: Settle | None = None,
                          lease_seconds: float = 30.0) -> tuple[CrashTrial, list[CrashTrial]]:
    """The run of `manifest` uninterrupted, and one trial per commit it made, each
    killed right after that commit and carried on by a new owner (module doc).

    `runtime(store, owner)` builds a runtime on `store` (the kit's; give it
    `clock` and a lease of `lease_seconds`); `settle(runtime, run_id)` answers
    a suspension and returns the run's next result (None: a suspension is the end).
    """
    plan = _Plan(manifest, runtime, clock, options, variables, settle, lease_seconds)
    counted = DyingStore(MemoryRunStore())
    reference = plan.to_the_end(counted)
    trials = [plan.to_the_end(DyingStore(MemoryRunStore(), after=after))
              for after in range(1, counted.commits + 1)]
    return reference, trials


@dataclass(frozen=True)
class _Plan:
    """How every trial runs the manifest."""

    manifest: AgentManifest
    runtime: RuntimeFactory
    clock: FakeClock
    options: dict[str, Any] | None
    variables: dict[str, Any] | None
    settle: Settle | None
    lease_seconds: float

    def to_the_end(self, store: DyingStore) -> CrashTrial:
        """Create the run on `store` and carry it to its end through every death."""
        owners = iter(f"crash-kit-owner-{number}" for number in range(1, 1_000_000))
        first = self.runtime(store, next(owners))
        run_id = first.create_run(manifest=self.manifest, options=self.options,
                                  variables=self.variables).run_id
        taking_over = False
        process = store
        while True:
            current = self.runtime(process, next(owners))
            try:
                record = current.store.load_run(run_id)
                if record is not None and record.status is RunStatus.SUSPENDED and self.settle:
                    result = self.settle(current, run_id)
                else:
                    result = current.run_sync(run_id=run_id, resume=True,
                                              allow_running_takeover=taking_over)
                if result.status is not RunStatus.SUSPENDED or self.settle is None:
                    return _ended(store, run_id, result)
                taking_over = False
            except ProcessDied:
                # A new process on the same durable store: the dead owner's lease
                # lapses before it takes over.
                process = DyingStore(store.inner)
                self.clock.advance(self.lease_seconds + 1)
                taking_over = True


def _ended(store: DyingStore, run_id: str, result: RunResult) -> CrashTrial:
    checkpoints = store.inner.list_checkpoints(run_id)
    last = store.inner.load_checkpoint(run_id, checkpoints[-1].seq) if checkpoints else None
    if last is None:
        return CrashTrial(store.after, result, (), (0, 0))
    steps = tuple((str(made.get("step_path")), str(made.get("status")))
                  for made in last.step_results)
    return CrashTrial(store.after, result, steps,
                      (last.budget.consumed_tokens, len(last.transcript)))


def assert_crash_safe(reference: CrashTrial, trials: list[CrashTrial]) -> None:
    """Every trial ended as the reference did: the same status, output,
    steps run and what they spent (`CrashTrial.outcome`), or AssertionError naming the commits
    after which it did not and what differed."""
    expected = reference.outcome()
    wrong = [(trial.commit, [name for name, got, want in zip(
                 ("status", "output", "steps", "spent"), trial.outcome(), expected,
                 strict=True) if got != want])
             for trial in trials if trial.outcome() != expected]
    assert not wrong, (f"killed after these commits the run ended otherwise than "
                       f"uninterrupted ({reference.result.status.value}, "
                       f"{reference.result.output!r}); (commit, what differed): {wrong}")


__all__ = ["COMMITS", "CrashTrial", "DyingStore", "ProcessDied", "assert_crash_safe",
           "crash_at_every_commit"]
