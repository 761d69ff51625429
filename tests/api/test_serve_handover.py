"""One `serve` hands its runs to the next without an operator (issue 34): on SIGTERM many
runs waiting on their model suspend `interrupted` and the server exits 0; the next server
resumes every one of them, and no call is made twice. A server killed outright leaves
its runs `running` under a lease of an hour, and the next server takes them over at
once, without waiting for the lease, since their owner's process is gone."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_chat_model import MODEL, FakeChatModel, fake_chat_model
from serve_process import (
    UNMETERED_POLICY,
    run_of,
    running_serve,
    start_serve,
    wait_for_status,
    wait_until,
)
from slow_receiver import SlowReceiver

from stores.records import RunRecord, RunStatus
from stores.sqlite import SqliteRunStore

pytestmark = pytest.mark.slow

RUNS = 20
POLICY = "webhooks:\n  allowPrivateNetworks: true\n" + UNMETERED_POLICY


@pytest.fixture
def model() -> Iterator[FakeChatModel]:
    with fake_chat_model() as fake:
        yield fake


def ask_then_call(receiver_url: str) -> dict[str, Any]:
    """A model request, then a webhook delivery: the effect that must happen once."""
    return {"schemaVersion": "1.0", "id": "ask-then-call",
            "variables": [{"key": "key", "type": "string", "value": "unnamed"}],
            "steps": [
                {"id": "ask", "type": "prompt", "prompt": "hello from {{ key }}",
                 "outputVariable": "answer"},
                {"id": "call", "type": "webhook", "url": f"{receiver_url}/call",
                 "timeoutMs": 60_000, "retries": 0, "body": {"answer": "{{ answer }}"}}]}


def create(http: httpx.Client, manifest: dict[str, Any], key: str) -> str:
    answer = http.post("/runs", json={"manifest": manifest, "variables": {"key": key},
                                      "options": {"model": MODEL}})
    assert answer.status_code == 201, answer.text
    run_id: str = answer.json()["run"]["runId"]
    return run_id


def stored(workdir: Path, run_ids: list[str]) -> list[RunRecord]:
    """The runs' records as the store keeps them, read while no server runs."""
    with SqliteRunStore(workdir / "runs.sqlite") as store:
        records = [store.load_run(run_id) for run_id in run_ids]
    assert all(record is not None for record in records)
    return [record for record in records if record is not None]


def test_sigterm_suspends_every_run_and_the_next_server_finishes_them_once(
        tmp_path: Path, model: FakeChatModel, receiver: SlowReceiver) -> None:
    receiver.release.set()  # deliveries are answered at once
    config = model.config_file(tmp_path, policy=POLICY)
    args = ["--config", str(config), "--grace-seconds", "120", "--reconcile-interval", "0.5"]
    manifest = ask_then_call(receiver.url)
    first = start_serve(tmp_path, args=args)
    try:
        with first.client() as http:
            run_ids = [create(http, manifest, f"run-{n}") for n in range(RUNS)]
        assert model.wait_for_in_flight(RUNS)
        first.process.send_signal(signal.SIGTERM)
        wait_until(lambda: "waiting up to" in first.output(), what="serve to start draining")
        model.release.set()  # the calls in flight end within the grace
        assert first.process.wait(120) == 0, first.output()
    finally:
        first.stop()
    assert receiver.paths() == []  # no run started its next call
    assert "Traceback" not in first.output()
    for record in stored(tmp_path, run_ids):
        assert (record.status, record.lease_owner) == (RunStatus.SUSPENDED, None), record
        assert record.suspension is not None and record.suspension.reason == "interrupted"
        assert record.resume_reason == "server-stopped"

    with running_serve(tmp_path, args=args) as second, second.client() as http:
        for run_id in run_ids:
            done = wait_for_status(http, run_id, "completed")
            assert done["attempt"] == 2
            assert done["lastSuspension"]["reason"] == "interrupted"
    # Each run asked its model once and delivered its webhook once.
    assert sorted(receiver.keys("/call")) == sorted(f"{run_id}:call" for run_id in run_ids)
    assert all(model.requests_naming(f"hello from run-{n}\"") == 1 for n in range(RUNS))


def test_a_killed_servers_runs_are_taken_over_at_once_not_when_their_lease_expires(
        tmp_path: Path, model: FakeChatModel, receiver: SlowReceiver) -> None:
    receiver.release.set()
    config = model.config_file(tmp_path, policy=POLICY)
    # An hour's lease: only a takeover that does not wait for it finishes in time.
    args = ["--config", str(config), "--lease-seconds", "3600", "--reconcile-interval", "0.5"]
    manifest = ask_then_call(receiver.url)
    first = start_serve(tmp_path, args=args)
    try:
        with first.client() as http:
            run_ids = [create(http, manifest, f"run-{n}") for n in range(3)]
            assert model.wait_for_in_flight(3)
            assert {run_of(http, run_id)["status"] for run_id in run_ids} == {"running"}
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(60)
    model.release.set()  # the dead server's requests are answered to no one

    with running_serve(tmp_path, args=args) as second, second.client() as http:
        for run_id in run_ids:
            done = wait_for_status(http, run_id, "completed")
            assert done["attempt"] == 2
    events = [json.loads(line) for line in
              (tmp_path / "events.jsonl").read_text(encoding="utf-8").splitlines()]
    takeovers = [event for event in events if event["type"] == "reconcile.resumed"
                 and event["data"]["from_status"] == "running"]
    assert sorted(event["run_id"] for event in takeovers) == sorted(run_ids)
    assert sorted(receiver.keys("/call")) == sorted(f"{run_id}:call" for run_id in run_ids)
