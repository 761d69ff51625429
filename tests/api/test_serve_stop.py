"""Stopping `agent-runtime serve`, gracefully or not, and what happens to the runs it was
executing: on SIGTERM no run starts another call, the calls in flight end within the
grace period and each run suspends `interrupted` for the next server to resume; a run
still busy after the grace, or left by a killed server, keeps its checkpoint and the
next server takes it over at once, its old owner being gone."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from serve_process import (
    ALLOW_LOOPBACK_WEBHOOKS,
    running_serve,
    start,
    start_serve,
    wait_for_status,
    wait_until,
    webhook_manifest,
)
from slow_receiver import SlowReceiver

from agent_runtime.api.server import NAMED_RUNS_LEFT, _named

pytestmark = pytest.mark.slow

TOKEN = "stop-test-token-0123456789abcdef"


def flags(workdir: Path, *extra: str) -> list[str]:
    config = workdir / "runtime.config.yaml"
    config.write_text(ALLOW_LOOPBACK_WEBHOOKS, encoding="utf-8")
    # A short lease and a frequent reconciler: a successor takes over within seconds.
    return ["--config", str(config), "--lease-seconds", "2", "--reconcile-interval", "0.5",
            *extra]


def test_sigterm_lets_the_call_in_flight_end_then_suspends_the_run_for_the_next_server(
        tmp_path: Path, receiver: SlowReceiver) -> None:
    serve = start_serve(tmp_path, token=TOKEN, args=flags(tmp_path, "--grace-seconds", "120"))
    try:
        with serve.client() as http:
            run_id = start(http, webhook_manifest(receiver.url, "graceful"))["runId"]
        assert receiver.wait_for("/graceful/first")
        serve.process.send_signal(signal.SIGTERM)
        wait_until(lambda: "waiting up to" in serve.output(), what="serve to start draining")
        receiver.release.set()
        assert serve.process.wait(120) == 0, serve.output()
    finally:
        serve.stop()
    # The call in flight ended and was kept; the next one did not start.
    assert receiver.paths() == ["/graceful/first"]
    with running_serve(tmp_path, token=TOKEN, args=flags(tmp_path)) as after, \
            after.client() as http:
        done = wait_for_status(http, run_id, "completed")
        assert done["attempt"] == 2
        assert done["lastSuspension"]["reason"] == "interrupted"
    assert receiver.paths() == ["/graceful/first", "/graceful/second"]


def test_a_run_still_executing_after_the_grace_period_is_taken_over_by_the_next_server(
        tmp_path: Path, receiver: SlowReceiver) -> None:
    serve = start_serve(tmp_path, token=TOKEN, args=flags(tmp_path, "--grace-seconds", "0.5"))
    try:
        with serve.client() as http:
            run_id = start(http, webhook_manifest(receiver.url, "abandoned"))["runId"]
        assert receiver.wait_for("/abandoned/first")
        serve.process.send_signal(signal.SIGTERM)
        assert serve.process.wait(120) == 1, serve.output()
    finally:
        serve.stop()
    assert f"still executing: {run_id}" in serve.output()

    # Its lease (2 s) has not expired: the next server takes it over at once anyway.
    receiver.release.set()
    with running_serve(tmp_path, token=TOKEN, args=flags(tmp_path)) as after, \
            after.client() as http:
        done = wait_for_status(http, run_id, "completed")
        assert done["attempt"] == 2
    keys = receiver.keys("/abandoned/first")
    assert len(keys) == 2 and keys[0] == keys[1] is not None  # the same delivery, resent


def test_a_run_stranded_by_a_killed_server_is_finished_by_the_next(
        tmp_path: Path, receiver: SlowReceiver) -> None:
    first = start_serve(tmp_path, token=TOKEN, args=flags(tmp_path))
    try:
        with first.client() as http:
            run_id = start(http, webhook_manifest(receiver.url, "stranded"))["runId"]
        assert receiver.wait_for("/stranded/first"), "the webhook step never called"
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(60)

    receiver.release.set()
    with running_serve(tmp_path, token=TOKEN, args=flags(tmp_path)) as second, \
            second.client() as http:
        done = wait_for_status(http, run_id, "completed")
        assert done["attempt"] == 2
    # The webhook was sent again under the same key: a receiver that
    # deduplicates by it sees one delivery.
    keys = receiver.keys("/stranded/first")
    assert len(keys) == 2 and keys[0] == keys[1] is not None
    assert receiver.paths().count("/stranded/second") == 1


def test_the_stop_line_names_at_most_twenty_runs_left_and_counts_the_rest() -> None:
    few = [f"run_{index:04d}" for index in range(3)]
    assert _named(few) == "run_0000, run_0001, run_0002"
    many = [f"run_{index:04d}" for index in range(1020)]
    line = _named(many)
    assert line.startswith(", ".join(many[:NAMED_RUNS_LEFT]) + " and 1000 more ")
    assert many[NAMED_RUNS_LEFT] not in line
    assert _named(many[:NAMED_RUNS_LEFT]) == ", ".join(many[:NAMED_RUNS_LEFT])
