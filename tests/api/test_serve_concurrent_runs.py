"""One `serve` keeps many runs waiting on their model at once, each an asyncio task, and
past its bound refuses to start more: 429 with Retry-After, nothing created (issue 34).

Before, a run held one of `--workers` (4) threads for its whole life, so a model
that answers slowly kept 4 runs waiting and the rest queued or left for the
reconciler. Here a fake OpenAI-compatible model holds every request until the
test lets it go: the number of requests it holds at once is the number of
runs executing at once. No time is measured.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_chat_model import MODEL, FakeChatModel, fake_chat_model
from serve_process import (
    UNMETERED_POLICY,
    Serve,
    assert_problem,
    run_of,
    running_serve,
    wait_until,
)

pytestmark = pytest.mark.slow

RUNS = 200
# The tenant's own quota (policy) must not be what stops it here; unset, it also
# costs nothing per request (each check reads up to its limit of runs).


def ask(name: str = "ask") -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": name, "steps": [
        {"id": "ask", "type": "prompt", "prompt": "hello from {{ key }}",
         "includeInFinalOutput": True}],
        "variables": [{"key": "key", "type": "string", "value": "unnamed"}]}


def create(http: httpx.Client, key: str) -> httpx.Response:
    return http.post("/runs", json={"manifest": ask(), "variables": {"key": key},
                                    "options": {"model": MODEL}})


def statuses(http: httpx.Client) -> dict[str, str]:
    found: dict[str, str] = {}
    cursor = None
    while True:
        page = http.get("/runs", params={"limit": 100, **({"cursor": cursor} if cursor else {})})
        assert page.status_code == 200, page.text
        body = page.json()
        found.update({run["runId"]: run["status"] for run in body["runs"]})
        cursor = body["cursor"]
        if cursor is None:
            return found


@pytest.fixture
def model() -> Iterator[FakeChatModel]:
    with fake_chat_model() as fake:
        yield fake


def test_one_event_loop_keeps_200_runs_waiting_on_their_model_at_once(
        tmp_path: Path, model: FakeChatModel) -> None:
    config = model.config_file(tmp_path, policy=UNMETERED_POLICY)
    args = ["--config", str(config), "--workers", "1"]
    with running_serve(tmp_path, args=args) as serve, serve.client() as http:
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda n: create(http, f"run-{n}"), range(RUNS)))
        assert [answer.status_code for answer in answers] == [201] * RUNS
        run_ids = [answer.json()["run"]["runId"] for answer in answers]
        # Every run is waiting on the model together: none waits for another to end.
        assert model.wait_for_in_flight(RUNS), \
            f"the model saw at most {model.peak} requests at once, not {RUNS}"
        model.release.set()
        wait_until(lambda: set(statuses(http).values()) == {"completed"},
                   what=f"all {RUNS} runs to complete")
        assert sorted(statuses(http)) == sorted(run_ids)
    assert model.peak >= RUNS
    # Each run asked its model once: nothing was repeated.
    assert all(model.requests_naming(f"hello from run-{n}\"") == 1 for n in range(RUNS))
    assert "left for the reconciler" not in serve.output()


def test_past_the_bound_a_new_run_is_refused_429_with_retry_after_and_nothing_is_created(
        tmp_path: Path, model: FakeChatModel) -> None:
    config = model.config_file(tmp_path, policy=UNMETERED_POLICY)
    args = ["--config", str(config), "--max-concurrent-runs", "3"]
    with running_serve(tmp_path, args=args) as serve, serve.client() as http:
        held = [create(http, f"held-{n}") for n in range(3)]
        assert [answer.status_code for answer in held] == [201] * 3
        assert model.wait_for_in_flight(3)
        refused = create(http, "refused")
        problem = assert_problem(refused, 429)
        assert "--max-concurrent-runs" in problem["detail"]
        assert int(refused.headers["retry-after"]) >= 1
        assert len(statuses(http)) == 3  # nothing was stored for the refused request
        model.release.set()
        wait_until(lambda: set(statuses(http).values()) == {"completed"},
                   what="the held runs to complete")
        # Places are free again: the next request starts its run at once.
        again = create(http, "after")
        assert again.status_code == 201, again.text
        run_id = again.json()["run"]["runId"]
        wait_until(lambda: run_of(http, run_id)["status"] == "completed",
                   what="the new run to complete")
    assert model.requests_naming("refused") == 0
    assert " WARNING " not in serve.output() and " ERROR " not in serve.output()


def test_one_tenant_at_its_share_is_refused_while_another_tenant_starts(
        tmp_path: Path, model: FakeChatModel) -> None:
    alice, bob = "alice-token-0123456789abcdef0123456789", "bob-token-fedcba9876543210fedcba987654"
    tokens = tmp_path / "tokens.yaml"
    from serve_process import write_tokens_file

    write_tokens_file(tokens, {alice: "alice", bob: "bob"})
    config = model.config_file(tmp_path, policy=UNMETERED_POLICY)
    args = ["--tokens", str(tokens), "--config", str(config), "--max-concurrent-runs", "4"]
    with running_serve(tmp_path, token=None, args=args) as serve, \
            serve.client(alice) as alices, serve.client(bob) as bobs:
        # By default one tenant of several may hold half of the places.
        assert [create(alices, f"alice-{n}").status_code for n in range(2)] == [201, 201]
        assert model.wait_for_in_flight(2)
        refused = create(alices, "alice-over")
        assert "--tenant-concurrent-runs" in assert_problem(refused, 429)["detail"]
        assert "retry-after" in refused.headers
        started = create(bobs, "bob-1")
        assert started.status_code == 201, started.text
        assert model.wait_for_in_flight(3)  # bob's run is waiting on the model too
        model.release.set()
        wait_until(lambda: set(statuses(alices).values()) == {"completed"},
                   what="alice's runs to complete")
        assert len(statuses(alices)) == 2
    assert_started_line(serve, "4 runs at once, 2 per tenant")


def assert_started_line(serve: Serve, text: str) -> None:
    first = serve.output().splitlines()[0]
    assert text in first, first
