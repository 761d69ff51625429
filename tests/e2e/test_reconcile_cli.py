"""`agent-runtime reconcile` on the SQLite store, with real processes: a run whose
owner was SIGKILLed is finished, a live (stopped) owner is left alone, a run
that keeps killing its owner ends failed, and racing reconcilers resume once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import cli_process
import pytest

from agent_runtime.cli import main
from agent_runtime.events import read_events
from agent_runtime.manifest import manifest_hash, manifest_json, parse_agent_manifest
from stores import open_store
from stores.records import RunRecord, RunStatus

LEASE_SECONDS = 2
STORE = ".agent-runtime/runs.sqlite"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    cli_process.write_four_steps(tmp_path)
    return tmp_path


def _steps(workdir: Path) -> list[str]:
    return [request["step_id"] for request in cli_process.model_requests(workdir)]


def _resumed_in_passes(stdout: Path) -> int:
    """Runs resumed so far by the passes of `reconcile --interval --format json`."""
    resumed = 0
    for line in stdout.read_text().splitlines():
        try:
            resumed += json.loads(line)["counts"]["resumed"]
        except (ValueError, KeyError):
            continue  # a line still being written
    return resumed


def _spawn(workdir: Path, *args: str, name: str) -> subprocess.Popen[bytes]:
    with (workdir / f"{name}.stdout").open("wb") as out, \
            (workdir / f"{name}.stderr").open("wb") as err:
        return cli_process.spawn_cli(workdir, *args, stdout=out, stderr=err)


def _cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = cli_process.run_cli(workdir, *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _reconcile(workdir: Path, *flags: str) -> dict[str, Any]:
    done = _cli(workdir, "reconcile", "--once", "--format", "json", *flags)
    assert done.returncode == 0, done.stderr
    body: dict[str, Any] = json.loads(done.stdout)
    return body


def _record(workdir: Path, run_id: str) -> RunRecord:
    with open_store("sqlite", str(workdir / STORE)) as store:
        record = store.load_run(run_id)
    assert record is not None
    return record


def _wait_for_lease_to_expire(workdir: Path, run_id: str) -> None:
    expires = _record(workdir, run_id).lease_expires_at
    assert expires is not None
    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.3)


@contextmanager
def _run_in_child(workdir: Path, run_id: str) -> Iterator[subprocess.Popen[bytes]]:
    """`agent-runtime run` of the four-step manifest, stopped at its slow second step."""
    child = _spawn(workdir, *cli_process.RUN_FOUR_STEPS, "--run-id", run_id, "--lease-seconds",
                   str(LEASE_SECONDS), "--format", "json", name=run_id)
    try:
        cli_process.wait_for(lambda: len(_steps(workdir)) >= 2, "the run's second model request",
                  child=child)
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def _kill_at_second_step(workdir: Path, run_id: str) -> None:
    with _run_in_child(workdir, run_id) as child:
        child.send_signal(signal.SIGKILL)


def _events(workdir: Path, type_: str) -> list[Any]:
    return [event for event in read_events(workdir / ".agent-runtime" / "events.jsonl")
            if event.type == type_]


@pytest.mark.slow
def test_reconcile_once_finishes_a_run_whose_owner_was_killed(workdir: Path) -> None:
    _kill_at_second_step(workdir, "killed")
    _wait_for_lease_to_expire(workdir, "killed")

    summary = _reconcile(workdir, "--lease-seconds", "5")

    assert summary["counts"] == {"candidates": 1, "resumed": 1, "skipped": 0,
                                 "suspended_runs": 0, "errors": 0}
    assert summary["runs"] == [{"run_id": "killed", "action": "resumed", "attempt": 2,
                                "status": "completed", "takeovers": 1}]
    record = _record(workdir, "killed")
    # takeovers counts takeovers in a row: the new attempt's checkpoints reset it
    assert (record.status, record.output, record.takeovers) == (RunStatus.COMPLETED, "four", 0)
    # `first` was answered and checkpointed before the kill: never asked again;
    # `second` was in flight: asked again by the new attempt. Nothing else repeats.
    assert _steps(workdir) == ["first", "second", "second", "third", "fourth"]
    resumed = _events(workdir, "reconcile.resumed")
    assert [(e.run_id, e.attempt, e.data["status"]) for e in resumed] == [
        ("killed", 2, "completed")]
    # the run's own events of the new attempt went to the same log
    assert [e.attempt for e in _events(workdir, "run.completed")] == [2]

    assert _reconcile(workdir)["counts"]["candidates"] == 0  # nothing left to do


@pytest.mark.slow
def test_reconcile_leaves_a_live_owner_alone_even_after_its_lease_expired(
        workdir: Path) -> None:
    with _run_in_child(workdir, "stopped") as child:
        # A stopped process cannot renew its lease, but it is not dead: it may
        # continue at any moment, so nobody else may take the run over.
        child.send_signal(signal.SIGSTOP)
        try:
            _wait_for_lease_to_expire(workdir, "stopped")
            summary = _reconcile(workdir)
        finally:
            child.send_signal(signal.SIGCONT)
        assert child.wait(timeout=300) == 0
        output = (workdir / "stopped.stdout").read_text()

    [outcome] = summary["runs"]
    assert (outcome["run_id"], outcome["action"], outcome["reason"]) == (
        "stopped", "skipped", "owner-alive")
    assert f"process {child.pid}" in outcome["detail"]
    result = json.loads(output)
    assert (result["status"], result["output"], result["attempt"]) == ("completed", "four", 1)
    assert _record(workdir, "stopped").takeovers == 0
    assert _steps(workdir) == ["first", "second", "third", "fourth"]
    skipped = _events(workdir, "reconcile.skipped")
    assert [(e.run_id, e.data["reason"]) for e in skipped] == [("stopped", "owner-alive")]


@pytest.mark.slow
def test_a_run_killed_again_past_the_takeover_bound_is_suspended_not_failed(workdir: Path) -> None:
    _kill_at_second_step(workdir, "doomed")
    _wait_for_lease_to_expire(workdir, "doomed")
    # The first takeover is allowed (bound 1): the reconciler resumes the run
    # itself, and is killed in the same step.
    reconciler = _spawn(workdir, "reconcile", "--once", "--max-takeovers", "1",
                        "--lease-seconds", str(LEASE_SECONDS), name="reconciler")
    try:
        cli_process.wait_for(lambda: len(_steps(workdir)) >= 3, "the takeover's model request",
                  child=reconciler)
        reconciler.send_signal(signal.SIGKILL)
    finally:
        reconciler.kill()
        reconciler.wait()
    record = _record(workdir, "doomed")
    assert (record.status, record.attempt, record.takeovers) == (RunStatus.RUNNING, 2, 1)
    assert record.lease_owner == f"{socket.gethostname()}:{reconciler.pid}"
    _wait_for_lease_to_expire(workdir, "doomed")

    summary = _reconcile(workdir, "--max-takeovers", "1")

    [outcome] = summary["runs"]
    assert (outcome["action"], outcome["takeovers"]) == ("suspended-run", 1)
    record = _record(workdir, "doomed")
    assert record.status is RunStatus.SUSPENDED and record.error is None
    assert record.suspension is not None and record.suspension.reason == "crash-loop"
    assert "died 2 times" in record.suspension.details["message"]
    assert _steps(workdir) == ["first", "second", "second"]  # not started a third time
    suspended = _events(workdir, "reconcile.suspended-run")
    assert [(e.run_id, e.data["takeovers"]) for e in suspended] == [("doomed", 1)]
    # A later pass leaves it waiting for an operator.
    assert _reconcile(workdir, "--max-takeovers", "1")["runs"] == []

    # The cause fixed, the operator resumes every crash-looped run at once: it
    # completes with its count at zero, and `first` (checkpointed) is not asked again.
    done = _cli(workdir, "reconcile", "--resume-crash-looped", "--format", "json")
    assert done.returncode == 0, done.stderr
    [outcome] = json.loads(done.stdout)["runs"]
    assert (outcome["run_id"], outcome["action"], outcome["reason"], outcome["status"]) == (
        "doomed", "resumed", "crash-loop", "completed")
    record = _record(workdir, "doomed")
    assert (record.status, record.takeovers) == (RunStatus.COMPLETED, 0)
    assert _steps(workdir) == ["first", "second", "second", "second", "third", "fourth"]


@pytest.mark.slow
def test_two_reconcilers_racing_for_a_run_resume_it_once(workdir: Path) -> None:
    _kill_at_second_step(workdir, "contested")
    _wait_for_lease_to_expire(workdir, "contested")

    racers = [_spawn(workdir, "reconcile", "--once", "--format", "json", name=f"racer{n}")
              for n in (1, 2)]
    for racer in racers:
        assert racer.wait(timeout=120) == 0
    summaries = [json.loads((workdir / f"racer{n}.stdout").read_text()) for n in (1, 2)]

    outcomes = [run for summary in summaries for run in summary["runs"]]
    assert len([run for run in outcomes if run["action"] == "resumed"]) == 1
    # the other one saw nothing to do, or lost the race
    assert all(run.get("reason") == "lost-race" for run in outcomes
               if run["action"] != "resumed")
    record = _record(workdir, "contested")
    assert (record.status, record.attempt, record.takeovers) == (RunStatus.COMPLETED, 2, 0)
    assert _steps(workdir) == ["first", "second", "second", "third", "fourth"]


@pytest.mark.slow
def test_reconcile_interval_takes_over_killed_runs_until_interrupted(workdir: Path) -> None:
    reconciler = _spawn(workdir, "reconcile", "--interval", "0.3", "--format", "json",
                        "--lease-seconds", str(LEASE_SECONDS), name="watcher")
    try:
        _kill_at_second_step(workdir, "watched")
        cli_process.wait_for(lambda: _record(workdir, "watched").status is RunStatus.COMPLETED,
                  "the reconciler to finish the run", child=reconciler)
        # The pass that resumed the run prints its summary when it ends, which
        # on a loaded machine can be a while after the run completed.
        cli_process.wait_for(lambda: _resumed_in_passes(workdir / "watcher.stdout") >= 1,
                  "the pass that resumed the run to report it", child=reconciler)
        reconciler.send_signal(signal.SIGINT)
        assert reconciler.wait(timeout=300) == 0, (workdir / "watcher.stderr").read_text()
    finally:
        reconciler.kill()
        reconciler.wait()
    stderr = (workdir / "watcher.stderr").read_text()
    assert "Traceback" not in stderr and "interrupted" in stderr
    passes = [json.loads(line) for line in
              (workdir / "watcher.stdout").read_text().splitlines()]
    assert len(passes) >= 2
    assert sum(summary["counts"]["resumed"] for summary in passes) == 1
    assert _steps(workdir) == ["first", "second", "second", "third", "fourth"]


def test_reconcile_decides_by_the_owner_process(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Leases expired long ago; only the run whose owner process is gone is resumed."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    owners = {"dead": f"{host}:{gone.pid}", "alive": f"{host}:{os.getpid()}",
              "remote": f"another-{host}:{os.getpid()}"}
    agent = parse_agent_manifest({"schemaVersion": "1.0", "id": "hello", "steps": [
        {"id": "hello", "type": "prompt", "prompt": "Hello."}]}, source="test")
    past = datetime.now(UTC) - timedelta(minutes=10)
    store_path = tmp_path / "runs.sqlite"
    with open_store("sqlite", str(store_path)) as store:
        for run_id, owner in owners.items():
            store.create_run(RunRecord(run_id=run_id, manifest_hash=manifest_hash(agent),
                                       manifest=manifest_json(agent),
                                       options={"model": "scripted/echo"}, created_at=past))
            store.resume_run(run_id, owner=owner, now=past, lease_seconds=30)

    code = main(["reconcile", "--store", str(store_path), "--events",
                 str(tmp_path / "events.jsonl"), "--format", "json"])

    assert code == 0
    outcomes = {run["run_id"]: run for run in json.loads(capsys.readouterr().out)["runs"]}
    assert (outcomes["dead"]["action"], outcomes["dead"]["status"]) == ("resumed", "completed")
    assert (outcomes["alive"]["action"], outcomes["alive"]["reason"]) == ("skipped",
                                                                          "owner-alive")
    assert (outcomes["remote"]["action"], outcomes["remote"]["reason"]) == ("skipped",
                                                                            "owner-unknown")
    assert "not this host" in outcomes["remote"]["detail"]
    with open_store("sqlite", str(store_path)) as store:
        records = [store.load_run(run_id) for run_id in owners]
    assert [record.status if record else None for record in records] == [
        RunStatus.COMPLETED, RunStatus.RUNNING, RunStatus.RUNNING]

    assert main(["reconcile", "--store", str(store_path), "--events", "none"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"skipped alive: owner-alive (process {os.getpid()} on {host} is running)",
        f"skipped remote: owner-unknown (owner on host 'another-{host}', not this host "
        f"({host!r}))",
        "reconcile: 2 candidates, 0 resumed, 2 skipped, 0 suspended as crash loops, 0 errors"]
