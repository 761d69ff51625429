"""Resident memory of a process and its children, from /proc (Linux; no psutil).

`VmRSS` is what a process holds now and `VmHWM` the most it ever held. A
process tree's figures are the sums over the processes alive when read, so a
`serve` that runs its runs in worker processes is counted whole. Where /proc
is missing (not Linux) every figure is 0 and the bench prints it as n/a.
"""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def rss_kb(pid: int | str = "self") -> tuple[int, int]:
    """(VmRSS, VmHWM) of one process in KiB; (0, 0) when it cannot be read."""
    try:
        text = (PROC / str(pid) / "status").read_text(encoding="ascii", errors="replace")
    except OSError:
        return 0, 0
    found = {"VmRSS": 0, "VmHWM": 0}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in found:
            found[name] = int(value.split()[0])
    return found["VmRSS"], found["VmHWM"]


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants alive now."""
    found = [pid]
    index = 0
    while index < len(found):
        for task in (PROC / str(found[index]) / "task").glob("*"):
            try:
                children = (task / "children").read_text(encoding="ascii").split()
            except OSError:
                continue
            found.extend(int(child) for child in children if int(child) not in found)
        index += 1
    return found


def tree_rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) summed over `pid` and its descendants, in KiB."""
    figures = [rss_kb(member) for member in process_tree(pid)]
    return sum(rss for rss, _ in figures), sum(peak for _, peak in figures)
