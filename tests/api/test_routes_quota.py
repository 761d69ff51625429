"""A tenant past its quota of unfinished runs, or of runs started in a minute, gets 429
problem+json with Retry-After from every route that creates a run; other tenants do not."""

from __future__ import annotations

from routes_harness import Api, manifest_text

from agent_runtime.engine import AgentRuntime
from agent_runtime.policy import HostPolicy
from agent_runtime.testing import FakeClock
from stores.base import RunStore
from stores.records import Budget, RunRecord


class ParkedLauncher:
    """Leaves every run `created`, as a busy host's queue does."""

    def start(self, run: RunRecord) -> None:
        pass

    def resume(self, run: RunRecord, *, reason: str, budget: Budget | None = None) -> None:
        pass


def api_with(store: RunStore, policy: HostPolicy) -> Api:
    runtime = AgentRuntime(store=store, clock=FakeClock(), owner="quota", policy=policy)
    return Api(store, runtime=runtime, launcher=ParkedLauncher())  # type: ignore[arg-type]


def create(api: Api, token: str = "alice-token") -> tuple[int, dict[str, str], dict[str, object]]:
    reply = api.post("/runs", {"manifest": manifest_text("hello.agent.yaml"),
                               "options": {"model": "scripted/echo"}}, token=token)
    return reply.status, reply.headers, reply.body


def test_unfinished_runs_past_the_quota_answer_429(store: RunStore) -> None:
    api = api_with(store, HostPolicy(max_concurrent_runs=2, runs_per_minute=None))
    assert [create(api)[0] for _ in range(2)] == [201, 201]
    status, headers, body = create(api)
    assert status == 429 and headers["retry-after"] == "5"
    assert headers["content-type"].startswith("application/problem+json")
    assert "policy.maxConcurrentRuns" in str(body["detail"])
    first = api.get("/runs").body["runs"][0]["runId"]
    assert api.post(f"/runs/{first}/fork", {}).status == 429  # a fork is a new run too
    assert create(api, token="bob-token")[0] == 201  # another tenant's quota is its own
    assert len(api.get("/runs").body["runs"]) == 2


def test_runs_per_minute_past_the_quota_answer_429_until_the_minute_passes(
        store: RunStore) -> None:
    api = api_with(store, HostPolicy(max_concurrent_runs=None, runs_per_minute=3))
    clock = api.runtime.clock
    assert isinstance(clock, FakeClock)
    for _ in range(3):
        assert create(api)[0] == 201
        clock.advance(10)
    status, headers, body = create(api)
    assert status == 429 and "policy.runsPerMinute" in str(body["detail"])
    assert headers["retry-after"] == "30"  # the first of the three leaves the window then
    clock.advance(30)
    assert create(api)[0] == 201


def test_a_resume_budget_over_the_hosts_cap_is_422_and_resumes_nothing(store: RunStore) -> None:
    runtime = AgentRuntime(store=store, clock=FakeClock(), owner="quota",
                           policy=HostPolicy(max_total_tokens=5000))
    api = Api(store, runtime=runtime)
    run = api.start("approval.agent.yaml")
    reply = api.post(f"/runs/{run['runId']}/resume", {"maxTotalTokens": 5001})
    assert reply.status == 422 and reply.problem["field"] == "maxTotalTokens"
    assert "policy.maxTotalTokens" in reply.problem["detail"]
    assert api.get(f"/runs/{run['runId']}").run["status"] == "suspended"
