"""What the routes need from the engine: forks that start elsewhere, tenants, origin options."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from routes_harness import ECHO, MANIFESTS

from agent_runtime import AgentRuntime
from agent_runtime.errors import InvalidInput
from agent_runtime.run_options import FORKED_FROM, REQUEST_SHA256
from agent_runtime.testing import FakeClock
from stores.base import RunStore
from stores.records import Budget, RunStatus

CHAIN = MANIFESTS / "prompt-chain.agent.yaml"


def runtime_on(store: RunStore) -> AgentRuntime:
    return AgentRuntime(store=store, clock=FakeClock(), owner="seams")


def test_create_fork_stores_a_created_run_that_runs_from_the_checkpoint(store: RunStore) -> None:
    runtime = runtime_on(store)
    source = runtime.run_sync(manifest=CHAIN, options=ECHO, tenant="alice")
    fork = runtime.create_fork(source.run_id, seq=2)
    assert fork.status is RunStatus.CREATED and fork.attempt == 0
    assert fork.options[FORKED_FROM] == {"run_id": source.run_id, "seq": 2}
    assert fork.tenant == "alice" and store.load_latest_checkpoint(fork.run_id) is None
    result = runtime.run_sync(run_id=fork.run_id, resume=True)
    assert result.status is RunStatus.COMPLETED and result.output == source.output
    first = store.load_checkpoint(fork.run_id, 1)
    original = store.load_checkpoint(source.run_id, 2)
    assert first is not None and original is not None
    assert first.attempt == 1 and first.variables == original.variables
    assert first.step_results == original.step_results


def test_a_fork_executed_by_advance_starts_from_the_checkpoint_too(store: RunStore) -> None:
    runtime = runtime_on(store)
    source = runtime.run_sync(manifest=CHAIN, options=ECHO)
    fork = runtime.create_fork(source.run_id, seq=1, tenant="bob")
    assert fork.tenant == "bob"
    store.resume_run(fork.run_id, owner="state-machine", now=runtime.clock.now(),
                     lease_seconds=60)
    result = asyncio.run(runtime.advance(fork.run_id))
    assert result.status is RunStatus.COMPLETED and result.output == source.output
    first = store.load_checkpoint(fork.run_id, 1)
    assert first is not None and first.attempt == 1
    assert [entry["step_path"] for entry in first.step_results] == ["draft"]


def test_a_fork_whose_source_is_gone_fails_with_a_clear_error(store: RunStore) -> None:
    runtime = runtime_on(store)
    source = runtime.run_sync(manifest=CHAIN, options=ECHO)
    fork = runtime.create_fork(source.run_id)
    store.delete_run(source.run_id)
    result = runtime.run_sync(run_id=fork.run_id, resume=True)
    assert result.status is RunStatus.FAILED
    assert result.error is not None and result.error["type"] == "fork_source_missing"
    record = store.load_run(fork.run_id)
    assert record is not None and record.status is RunStatus.FAILED
    assert record.error is not None and source.run_id in record.error.message


def test_fork_keeps_running_at_once_with_its_own_budget(store: RunStore) -> None:
    runtime = runtime_on(store)
    source = runtime.run_sync(manifest=CHAIN, options=ECHO, budget=Budget(max_total_tokens=10**6))
    result = asyncio.run(runtime.fork(source.run_id, seq=1, new_run_id="forked",
                                      budget=Budget(max_total_tokens=1)))
    assert result.run_id == "forked" and result.status is RunStatus.SUSPENDED
    assert result.suspension is not None and result.suspension["reason"] == "token-budget"
    again = asyncio.run(runtime.fork(source.run_id, seq=1))
    assert again.status is RunStatus.COMPLETED
    record = store.load_run(again.run_id)
    assert record is not None and record.budget.max_total_tokens == 10**6
    with pytest.raises(InvalidInput):
        asyncio.run(runtime.fork(source.run_id, seq=99))


def test_a_new_run_never_inherits_where_another_came_from(store: RunStore) -> None:
    runtime = runtime_on(store)
    record, _ = runtime.new_run(manifest=CHAIN, options={
        **ECHO, FORKED_FROM: {"run_id": "x", "seq": 1}, REQUEST_SHA256: "abc"}, tenant="t")
    assert record.options == ECHO and record.tenant == "t"


def test_a_created_run_is_started_later_with_its_tenant(store: RunStore) -> None:
    runtime = runtime_on(store)
    record = runtime.create_run(manifest=CHAIN, options=ECHO, tenant="alice")
    runtime.clock.advance(1)  # type: ignore[attr-defined]
    assert record.created_at < runtime.clock.now() - timedelta(seconds=0.5)
    result = runtime.run_sync(run_id=record.run_id, resume=True)
    assert result.status is RunStatus.COMPLETED
    done = store.load_run(record.run_id)
    assert done is not None and done.tenant == "alice"


def test_advance_applies_a_new_token_limit_like_a_resume(store: RunStore) -> None:
    runtime = runtime_on(store)
    run = runtime.run_sync(manifest=CHAIN, options=ECHO, budget=Budget(max_total_tokens=1))
    assert run.status is RunStatus.SUSPENDED
    store.resume_run(run.run_id, owner="state-machine", now=runtime.clock.now(),
                     lease_seconds=60)
    result = asyncio.run(runtime.advance(run.run_id, budget=Budget(max_total_tokens=10**6)))
    assert result.status is RunStatus.COMPLETED
    latest = store.load_latest_checkpoint(run.run_id)
    assert latest is not None and latest.budget.max_total_tokens == 10**6
