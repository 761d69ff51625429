"""CPU time of a process and its children, from /proc (Linux; no psutil).

A process's `utime` and `stime` in /proc/<pid>/stat count every one of its
threads, so a tree's CPU seconds are what `serve` (with its worker processes,
if any) spent in all. Where /proc is missing (not Linux) the figure is NaN and
the bench prints it as n/a.
"""

from __future__ import annotations

import math
import os

from process_memory import PROC, process_tree

# /proc/<pid>/stat's fields after the command name (which is in parentheses and
# may hold spaces): utime and stime, in clock ticks, are the 12th and 13th.
_UTIME, _STIME = 11, 12


def cpu_seconds(pid: int | str = "self") -> float:
    """User and system CPU seconds of one process so far; NaN when it cannot be read."""
    try:
        text = (PROC / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
        fields = text[text.rindex(")") + 2:].split()
        ticks = int(fields[_UTIME]) + int(fields[_STIME])
    except (OSError, ValueError, IndexError):
        return math.nan
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """`cpu_seconds` summed over `pid` and its descendants alive now."""
    return sum(cpu_seconds(member) for member in process_tree(pid))
