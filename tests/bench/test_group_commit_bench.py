"""bench/group_commit.py on a tiny batch, so the benchmark cannot rot unseen.

Run as `make bench` runs it, with its `--baseline` revision measured in a child
process from an exported tree: the test asserts that every figure of issue 34's
acceptance 3 is printed as a number, never what the numbers are (a loaded
machine makes them anything), and that a revision git cannot give is named in
the bench's error.
"""

from __future__ import annotations

import gc
import re
import subprocess
import sys
from pathlib import Path

import group_commit
import pytest

from agent_runtime.api.collector_pace import YOUNG_COLLECTION_EVERY

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "group_commit.py"
# The revision `make bench` measures: main before group commit.
BASELINE = "e17daf8"
NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"


def _bench(*arguments: str) -> subprocess.CompletedProcess[str]:
    # The timeout only ends a hung bench: a run takes a few seconds even on a slow
    # machine, so a loaded one is nowhere near it.
    return subprocess.run([sys.executable, str(BENCH), "--runs", "4", "--saves", "3",
                           "--rounds", "1", *arguments], capture_output=True, text=True,
                          check=False, cwd=REPO, timeout=300)


def _has_revision(revision: str) -> bool:
    found = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{revision}^{{commit}}"],
                           capture_output=True, check=False)
    return found.returncode == 0


@pytest.mark.skipif(not _has_revision(BASELINE),
                    reason=f"this checkout has no git history holding {BASELINE}")
def test_every_figure_is_printed_with_the_baseline_revisions_store() -> None:
    done = _bench("--baseline", BASELINE)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for label in ("--baseline store", "one commit each", "group commit", "group commit, threads",
                  "no fsync (NORMAL)"):
        assert re.search(rf"^  {re.escape(label)} +{NUMBER} commits/s  synchronous=\w+ +"
                         rf"{NUMBER} saves per transaction$", out, re.MULTILINE), out
    # The old store makes a transaction of every save.
    assert re.search(r"--baseline store .* 1\.0 saves per transaction", out), out
    assert re.search(rf"ratio group commit / one commit each +{NUMBER}  \(target >= 5\)", out)
    assert re.search(rf"ratio group commit / the store at {BASELINE}\w* +{NUMBER}  "
                     r"\(target >= 5: today's commits per second, issue 34\)", out), out


def test_without_a_baseline_no_baseline_figure_is_printed() -> None:
    done = _bench()
    assert done.returncode == 0, done.stderr
    assert re.search(rf"ratio group commit / one commit each +{NUMBER}", done.stdout)
    assert "--baseline store" not in done.stdout
    assert "the store at" not in done.stdout


def test_a_revision_git_cannot_give_is_named() -> None:
    done = _bench("--baseline", "no-such-revision")
    assert done.returncode != 0
    assert "--baseline no-such-revision: git rev-parse failed" in done.stderr, done.stderr


def test_the_collector_is_set_as_serve_sets_it() -> None:
    threshold = gc.get_threshold()
    try:
        group_commit.collect_as_serve(YOUNG_COLLECTION_EVERY)
        assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY, *threshold[1:])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
