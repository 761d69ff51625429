"""bench/process_cpu.py: a process tree's CPU seconds, read from /proc."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_cpu import cpu_seconds, tree_cpu_seconds

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(),
                                reason="reads /proc (Linux)")

# /proc counts whole clock ticks (1/100 s here): a figure can fall short of the
# CPU spent by up to a tick at each of its two readings.
_TICKS = 2 / os.sysconf("SC_CLK_TCK")
# A child that burns CPU until its stdin closes, saying once it has begun.
_BURNER = ("import sys, threading\n"
           "stop = threading.Event()\n"
           "threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()\n"
           "print('burning', flush=True)\n"
           "while not stop.is_set():\n"
           "    sum(range(1000))\n")


def _burn_until(seconds: float) -> None:
    """Spend CPU on this thread until the process has used `seconds` more of it."""
    start = time.process_time()
    while time.process_time() - start < seconds:
        sum(range(1000))


def test_a_process_cpu_seconds_grow_with_the_cpu_it_spends() -> None:
    before = cpu_seconds()
    _burn_until(0.2)
    assert cpu_seconds() - before >= 0.2 - _TICKS


def test_a_process_that_cannot_be_read_has_no_figure() -> None:
    assert math.isnan(cpu_seconds(2**22 + 12345))  # above any pid_max Linux allows


def test_a_tree_counts_its_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", _BURNER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "burning\n"
        own = cpu_seconds()
        # Poll (without spending CPU here) until the child alone has spent 0.2 s;
        # a child that died first fails the test below instead of stalling it.
        while child.poll() is None and cpu_seconds(child.pid) < 0.2:
            time.sleep(0.01)  # the poll's pace, not a limit
        assert child.poll() is None, "the burning child exited"
        tree = tree_cpu_seconds(child.pid)
        assert tree >= 0.2
        # The parent's tree holds the child's seconds besides its own.
        assert tree_cpu_seconds(os.getpid()) >= own + 0.2 - _TICKS
    finally:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.close()
        child.wait(timeout=60)
        child.stdout.close()
