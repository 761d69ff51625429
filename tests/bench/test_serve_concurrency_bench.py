"""bench/serve_concurrency.py on a tiny batch, so the benchmark cannot rot unseen.

The bench is run as `make bench` runs it, against a real `serve`, the fake
model and (when the `bench` extra is installed) LangGraph and DBOS, with 5
runs and 0.05 s answers; the test asserts that every figure of issue 34's
acceptance 1 and 2 is printed as a number, never what the numbers are (a
loaded machine makes them anything). Its figure arithmetic is checked on
made-up timestamps.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from serve_concurrency import Figures, peak_overlap, timing_figures
from serve_load import peak_cpus_busy

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"

NUMBER = r"-?[0-9][0-9,]*(?:\.[0-9]+)?"
OURS_ONLY = ("POST /runs p50 (ms)", "POST /runs p99 (ms)", "serve CPU per run (ms)",
             "serve CPUs busy, mean")
EVERY_ENGINE = ("runs/s", "added per step p50 (ms)", "added per step p99 (ms)",
                "start delay p50 (s)", "start delay p99 (s)", "runs in flight, peak",
                "idle RSS (MiB)",
                "peak RSS (MiB)", "RSS per waiting run (KiB)", "model loop lag p99 (ms)")


def test_added_time_is_read_between_a_runs_answers_and_its_next_request() -> None:
    figures = Figures("ours", runs=2)
    # Run a: submitted at 10, asks at 11 and 13.5 (answered 12, 14), done at 14.25.
    calls = {"bench-run-ours-000000": [[13.5, 14.0], [11.0, 12.0]],
             "bench-run-ours-000001": [[20.0, 21.0]]}
    runs = {"bench-run-ours-000000": [10.0, 14.25], "bench-run-ours-000001": [19.0, 21.5]}
    timing_figures(figures, calls, runs, first_submit=9.5)

    assert figures.completed == 2
    assert figures.runs_per_second == pytest.approx(2 / (21.5 - 9.5))
    assert sorted(figures.added_ms) == pytest.approx([250.0, 500.0, 1500.0])
    assert sorted(figures.start_delay_s) == pytest.approx([1.0, 1.0])
    assert figures.peak_in_flight == 1  # a ran 11-14.25, b 20-21.5: never together


def test_runs_in_flight_counts_the_runs_between_first_request_and_completion() -> None:
    figures = Figures("ours", runs=3)
    calls = {"bench-run-ours-000000": [[1.0, 2.0]], "bench-run-ours-000001": [[1.5, 2.5]],
             "bench-run-ours-000002": [[3.0, 4.0]]}
    # a: 1-3, b: 1.5-2.8, c: 3-4.5; a ends as c starts, so at most two at once.
    runs = {"bench-run-ours-000000": [0.5, 3.0], "bench-run-ours-000001": [0.5, 2.8],
            "bench-run-ours-000002": [0.5, 4.5]}
    timing_figures(figures, calls, runs, first_submit=0.5)
    assert figures.peak_in_flight == 2
    assert peak_overlap([(0.0, 1), (1.0, 1), (2.0, 1), (3.0, -1), (3.0, -1), (3.0, 1)]) == 3
    assert peak_overlap([]) == 0


def test_a_run_the_model_never_saw_adds_no_step() -> None:
    figures = Figures("dbos", runs=1)
    timing_figures(figures, {}, {"bench-run-dbos-000000": [1.0, 2.0]}, first_submit=1.0)
    assert figures.completed == 1
    assert figures.added_ms == []
    assert math.isnan(Figures("x", runs=1).rss_per_run_kb)


def test_the_busy_peak_is_the_busiest_second_of_the_samples() -> None:
    # (time, CPU seconds so far): a quiet second, a busy one, a quiet tail.
    samples = [(0.0, 0.0), (0.5, 0.1), (1.0, 0.2), (1.5, 1.0), (2.0, 1.8), (2.5, 1.9)]
    # Windows 0-1: 0.2 CPUs; 0.5-1.5: 0.9; 1-2: 1.6; 1.5-2.5: 0.9.
    assert peak_cpus_busy(samples) == pytest.approx(1.6)
    # Samples unevenly spaced: a window is the first sample a second or more on.
    assert peak_cpus_busy([(0.0, 0.0), (0.4, 0.0), (1.3, 1.3), (3.3, 2.3)]) \
        == pytest.approx(1.0)
    assert math.isnan(peak_cpus_busy(samples[:2]))  # none spans a second
    assert math.isnan(peak_cpus_busy([]))


def _figure(output: str, label: str) -> list[str]:
    """The cells of a table row, by its label."""
    found = re.search(rf"^  {re.escape(label)}\s+(.*)$", output, re.MULTILINE)
    assert found, f"no {label!r} row in:\n{output}"
    return found.group(1).split("   (target")[0].split()


@pytest.mark.slow
def test_the_quick_bench_prints_every_figure(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "serve_concurrency.py"), "--quick", "--runs", "5",
         "--model-delay", "0.05", "--timeout", "600",
         "--serve-arg=--no-access-log", "--serve-arg=--no-such-serve-flag=3"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    output = done.stdout
    assert done.returncode == 0, f"{output}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr

    assert "5 runs of 5 tool iterations each, model answers in 0.05 s" in output
    # A flag this serve lacks is left out, by name; one it has is passed, and the
    # flags serve was given are printed.
    assert "note: this serve does not take --no-such-serve-flag; left out" in output
    assert "take --no-access-log" not in output
    assert "\n  serve --no-access-log\n" in output
    # The peers measured head the table's columns; one not installed is named.
    header = re.search(r"^\s+ours(.*)$", output, re.MULTILINE)
    assert header, output
    peers = header.group(1).split()
    assert set(peers) <= {"langgraph", "dbos"}
    assert _figure(output, "completed")[0] == "5/5"
    figure = NUMBER if Path("/proc/self/status").is_file() else rf"{NUMBER}|n/a"
    for label in EVERY_ENGINE:
        cells = _figure(output, label)
        assert len(cells) == 1 + len(peers), (label, cells)
        pattern = figure if "RSS" in label else NUMBER
        assert all(re.fullmatch(pattern, cell) for cell in cells), (label, cells)
    for label in OURS_ONLY:
        pattern = figure if "CPU" in label else NUMBER
        assert re.fullmatch(pattern, _figure(output, label)[0]), label
    # Five quick runs may all end within a second: then no window spans one.
    assert re.fullmatch(rf"{NUMBER}|n/a", _figure(output, "serve CPUs busy, peak 1 s")[0])
    assert _figure(output, "POST /runs rejected")[0] == "0"
    # A count, "0" on a quiet machine (or "N x ReadError, ..."): each was sent again.
    assert re.fullmatch(NUMBER, _figure(output, "POST /runs connection failed")[0])
    for peer in ("langgraph", "dbos"):
        if peer in peers:
            assert re.search(rf"ratio runs/s ours / {peer}: +{NUMBER} +\(target >= 1\)",
                             output), output
        else:
            assert f"{peer}: not installed" in output
