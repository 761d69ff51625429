"""`agent-runtime serve --processes N`: a supervisor and N serve processes on one socket
and one store. The runs they are given complete; a process that dies is replaced and
its runs are finished by the others; SIGTERM stops them all cleanly; a killed
supervisor leaves no process serving; a child that cannot start stops the server."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from serve_process import (
    ALLOW_LOOPBACK_WEBHOOKS,
    ECHO,
    FIXTURES,
    REPO,
    Serve,
    start,
    start_serve,
    wait_for_status,
    wait_until,
    webhook_manifest,
)
from slow_receiver import SlowReceiver

from agent_runtime.api.place_ledger import PlaceLedger
from agent_runtime.cli.serve import MAX_PROCESSES, process_count
from agent_runtime.cli.serve_processes import (
    CHILD_FLAG,
    MAX_QUICK_EXITS,
    ChildEnds,
    ServeProcesses,
)
from agent_runtime.errors import InvalidInput
from stores import open_store

TOKEN = "processes-test-token-0123456789abcdef"


def children(pid: int) -> set[int]:
    """The live (not yet exited) children of `pid`."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    found = {int(word) for word in path.read_text().split()} if path.exists() else set()
    return {child for child in found if _alive(child)}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def owner_pid(workdir: Path, run_id: str) -> int | None:
    """The pid of the process whose lease the run holds (owner `host:pid`), read from
    the store itself."""
    with open_store("sqlite", str(workdir / "runs.sqlite")) as store:
        owner = store.load_run(run_id).lease_owner
    return int(owner.rsplit(":", 1)[1]) if owner else None


def _webhook_serve(workdir: Path, *flags: str) -> Serve:
    """Two processes whose runs' webhooks may call the test's receiver."""
    config = workdir / "runtime.config.yaml"
    config.write_text(ALLOW_LOOPBACK_WEBHOOKS, encoding="utf-8")
    return start_serve(workdir, token=TOKEN,
                       args=["--processes", "2", "--config", str(config), *flags])


@pytest.mark.slow
def test_two_processes_complete_the_runs_posted_and_stop_cleanly_on_sigterm(
        tmp_path: Path) -> None:
    # No --token: the supervisor writes one, and every child accepts it.
    serve = start_serve(tmp_path, token=None, args=["--processes", "2"])
    try:
        assert "on 2 processes of 1" in serve.output()
        pids = wait_until(lambda: (found := children(serve.process.pid)) and
                          len(found) == 2 and found, what="two serve processes")
        # Each in a slot of its own, with connections of its own (the kernel does
        # not spread them evenly).
        wait_until(lambda: all(re.search(rf"serve process {pid} started \(slot [01], 256 "
                                         r"connections\)", serve.output()) for pid in pids),
                   what="both processes serving")
        assert len(set(re.findall(r"started \(slot (\d)", serve.output()))) == 2
        token = (tmp_path / ".agent-runtime" / "serve.token").read_text().strip()
        manifest = (FIXTURES / "hello.agent.yaml").read_text(encoding="utf-8")
        run_ids = []
        for _ in range(8):  # a connection each: the kernel spreads them over the children
            with serve.client(token) as http:
                run_ids.append(start(http, manifest)["runId"])
        with serve.client(token) as http:
            for run_id in run_ids:
                wait_for_status(http, run_id, "completed")
        serve.process.send_signal(signal.SIGTERM)
        assert serve.process.wait(120) == 0, serve.output()
    finally:
        serve.stop()
    assert not any(_alive(pid) for pid in pids)
    assert serve.output().count("agent_runtime.serve: stopped") == 2


@pytest.mark.slow
def test_a_killed_process_is_replaced_and_its_run_is_finished_by_the_other(
        tmp_path: Path, receiver: SlowReceiver) -> None:
    serve = _webhook_serve(tmp_path, "--lease-seconds", "2", "--reconcile-interval", "0.5")
    try:
        wait_until(lambda: len(children(serve.process.pid)) == 2, what="two serve processes")
        with serve.client() as http:
            run_id = start(http, webhook_manifest(receiver.url, "orphan"))["runId"]
        assert receiver.wait_for("/orphan/first")
        victim = wait_until(lambda: owner_pid(tmp_path, run_id), what="the run's owner")
        assert victim in children(serve.process.pid)
        os.kill(victim, signal.SIGKILL)
        receiver.release.set()
        with serve.client() as http:
            done = wait_for_status(http, run_id, "completed")
        assert done["attempt"] == 2
        replaced = wait_until(lambda: (found := children(serve.process.pid)) and
                              len(found) == 2 and victim not in found and found,
                              what="a process in the killed one's place")
        wait_until(lambda: all(f"serve process {pid} started" in serve.output()
                               for pid in replaced), what="the new process serving")
        assert f"serve process {victim} exited with -9; starting another" in serve.output()
    finally:
        assert serve.stop() == 0, serve.output()
    # The webhook was sent again under the same key, and the step after it once.
    keys = receiver.keys("/orphan/first")
    assert len(keys) == 2 and keys[0] == keys[1] is not None
    assert receiver.paths().count("/orphan/second") == 1


@pytest.mark.slow
def test_the_processes_stop_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    serve = start_serve(tmp_path, token=TOKEN, args=["--processes", "2"])
    try:
        pids = wait_until(lambda: (found := children(serve.process.pid)) and
                          len(found) == 2 and found, what="two serve processes")
    finally:
        serve.process.send_signal(signal.SIGKILL)
        serve.process.wait(60)
    wait_until(lambda: not any(_alive(pid) for pid in pids), what="the children to stop")
    assert "the supervising serve process is gone; stopping" in serve.output()


@pytest.mark.parametrize(("flags", "reason"), [
    (["--processes", "0"], "must be 1 to 64"),
    (["--processes", "2", "--store-driver", "memory"], "the memory store lives in one process"),
    (["--processes", "many"], "must be a number of processes or auto, not 'many'"),
    ([CHILD_FLAG, "x"], "for its children only"),
])
def test_processes_flags_are_checked(tmp_path: Path, flags: list[str], reason: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "agent_runtime.cli", "serve", "--port", "0",
                           "--token", TOKEN, *flags], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    flag = CHILD_FLAG if flags[0] == CHILD_FLAG else "--processes"
    assert flag in done.stderr and reason in done.stderr, done.stderr


@pytest.mark.slow
def test_the_run_bound_is_the_servers_whichever_process_a_request_reaches(
        tmp_path: Path, receiver: SlowReceiver) -> None:
    serve = _webhook_serve(tmp_path, "--max-concurrent-runs", "2")
    try:
        wait_until(lambda: len(children(serve.process.pid)) == 2, what="two serve processes")
        # One connection, so one process takes both runs: it may hold both of the
        # server's places, not half of them.
        with serve.client() as http:
            held = [start(http, webhook_manifest(receiver.url, name))["runId"]
                    for name in ("one", "two")]
        assert receiver.wait_for("/one/first") and receiver.wait_for("/two/first")
        # A new connection each: whichever process a request reaches, the server is full.
        for _ in range(4):
            with serve.client() as http:
                refused = http.post("/runs", json={"manifest": webhook_manifest(
                    receiver.url, "three"), "options": ECHO})
            assert refused.status_code == 429, refused.text
            assert "executes 2 runs at once" in refused.text
            assert refused.headers["retry-after"] == "1"
        receiver.release.set()
        with serve.client() as http:
            for run_id in held:
                wait_for_status(http, run_id, "completed")
            # Their places are given back, in whichever process held them, as their
            # tasks end (just after the runs' last commits): a client retries.
            again = {"manifest": webhook_manifest(receiver.url, "four"), "options": ECHO}
            admitted = wait_until(lambda: (answer := http.post("/runs", json=again))
                                  .status_code == 201 and answer.json()["run"],
                                  what="a place given back")
            wait_for_status(http, admitted["runId"], "completed")
    finally:
        assert serve.stop() == 0, serve.output()
    assert "/three/first" not in receiver.paths()


def _thread_cpus(pid: int) -> set[str]:
    """The CPUs each thread of `pid` may run on, as /proc lists them (one entry a thread)."""
    return {line.split(":", 1)[1].strip()
            for task in Path(f"/proc/{pid}/task").iterdir()
            for line in (task / "status").read_text().splitlines()
            if line.startswith("Cpus_allowed_list:")}


@pytest.mark.slow
def test_pinned_processes_each_keep_every_thread_on_their_own_cpu(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))  # the supervisor's, which its children inherit
    serve = start_serve(tmp_path, token=TOKEN, args=["--processes", "2", "--pin-cpus"])
    try:
        pids = wait_until(lambda: (found := children(serve.process.pid)) and
                          len(found) == 2 and found, what="two serve processes")
        slots = wait_until(lambda: len(found := dict(re.findall(
            r"serve process (\d+) started \(slot (\d)", serve.output()))) == 2 and found,
            what="both processes serving")
        with serve.client() as http:  # they serve as before
            run_id = start(http, (FIXTURES / "hello.agent.yaml").read_text())["runId"]
            wait_for_status(http, run_id, "completed")
        for pid in pids:
            cpu = cpus[int(slots[str(pid)]) % len(cpus)]
            assert f"serve process {pid} pinned to CPU {cpu}" in serve.output()
            assert os.sched_getaffinity(pid) == {cpu}
            assert _thread_cpus(pid) == {str(cpu)}  # every thread it started since
        # The supervisor itself is not pinned.
        assert os.sched_getaffinity(serve.process.pid) == set(cpus)
    finally:
        assert serve.stop() == 0, serve.output()


@pytest.mark.slow
def test_a_single_pinned_serve_keeps_every_thread_on_the_first_cpu(tmp_path: Path) -> None:
    cpu = min(os.sched_getaffinity(0))
    serve = start_serve(tmp_path, token=TOKEN, args=["--pin-cpus"])
    try:
        with serve.client() as http:
            run_id = start(http, (FIXTURES / "hello.agent.yaml").read_text())["runId"]
            wait_for_status(http, run_id, "completed")
        assert f"serve process {serve.process.pid} pinned to CPU {cpu}" in serve.output()
        assert _thread_cpus(serve.process.pid) == {str(cpu)}
    finally:
        assert serve.stop() == 0, serve.output()


def test_pin_to_cpu_keeps_the_process_on_the_slots_cpu_round_robin() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    probe = ("import os, sys\nfrom agent_runtime.cli.serve_processes import pin_to_cpu\n"
             "print(pin_to_cpu(int(sys.argv[1])), *sorted(os.sched_getaffinity(0)))")
    for slot in (0, 1, len(cpus)):
        done = subprocess.run([sys.executable, "-c", probe, str(slot)], capture_output=True,
                              text=True, timeout=60, check=True,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
        cpu = cpus[slot % len(cpus)]
        assert done.stdout.split() == [str(cpu), str(cpu)]


def test_auto_is_a_process_per_core_this_process_may_run_on() -> None:
    assert process_count("auto") == min(len(os.sched_getaffinity(0)), MAX_PROCESSES)
    assert process_count("3") == 3  # the bounds are checked with the other flags


def test_a_childs_ends_are_read_back_from_its_flag() -> None:
    ends = ChildEnds(7, 8, 9, 1, 1764918626.123456)
    assert ChildEnds.parse(ends.flag()) == ends
    assert ends.server_started().isoformat() == "2025-12-05T07:10:26.123456+00:00"
    for bad in ("7", "7,8,9,1", "7,8,9,x,1.5", "7,8,9,1,soon"):
        with pytest.raises(InvalidInput):
            ChildEnds.parse(bad)


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _script(tmp_path: Path, body: str) -> list[str]:
    """A child that counts its starts in `starts` (one line each), then runs `body`."""
    starts = tmp_path / "starts"
    code = (f"import pathlib, signal, sys\n"
            f"starts = pathlib.Path({str(starts)!r})\n"
            f"with starts.open('a') as out: out.write('start\\n')\n"
            f"count = len(starts.read_text().splitlines())\n{body}")
    return [sys.executable, "-c", code]


def test_a_child_that_keeps_exiting_at_start_stops_the_server(tmp_path: Path) -> None:
    # Every exit comes at once after the start (the clock never moves).
    supervisor = ServeProcesses(_script(tmp_path, "sys.exit(3)\n"), 1, _listening(),
                                PlaceLedger.create(1, ["local"]), clock=lambda: 0.0)
    assert supervisor.run() == 1
    assert len((tmp_path / "starts").read_text().splitlines()) == MAX_QUICK_EXITS


def test_a_child_that_exits_while_serving_is_replaced_and_a_stop_reaches_its_successor(
        tmp_path: Path) -> None:
    # The first child exits; the second serves until SIGTERM, then exits 0.
    body = ("if count == 1:\n    sys.exit(3)\n"
            "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
            "pathlib.Path(str(starts) + '.ready').touch()\n"
            "while True:\n    signal.pause()\n")
    ticks = iter(range(0, 10**6, 100))  # every exit long after its start
    ledger = PlaceLedger.create(1, ["local"])
    # The first child's row as it left it: places of runs that died with it.
    left = PlaceLedger(os.dup(ledger.fileno()), slot=0)
    with left.locked():
        left.add("local", 3)
    assert left.total() == 3
    supervisor = ServeProcesses(_script(tmp_path, body), 1, _listening(), ledger,
                                clock=lambda: float(next(ticks)))
    ready = tmp_path / "starts.ready"
    seen_by_successor: list[int] = []

    def stop_when_ready() -> None:
        wait_until(ready.exists, what="the second child")
        seen_by_successor.append(left.total())
        supervisor.stop()

    stopper = threading.Thread(target=stop_when_ready)
    stopper.start()
    try:
        assert supervisor.run() == 0
    finally:
        stopper.join()
    assert len((tmp_path / "starts").read_text().splitlines()) == 2
    assert supervisor.pids() == []
    # The dead child's places were given back before its successor started.
    assert seen_by_successor == [0]
    left.close()
