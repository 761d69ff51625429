"""Another revision's code, for a bench to measure beside this tree's in the same run.

A bench given `--baseline REV` exports the tree of git revision REV of this
checkout into a temporary directory and runs its subject there, in a child
process with that directory first on PYTHONPATH, so the two figures come from
one run, on the same machine under the same load.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export_revision(revision: str, directory: Path) -> str:
    """Write the tree of git `revision` of this checkout into `directory`; its short
    commit id. Exits naming the revision when git cannot give it."""
    def git(*arguments: str) -> bytes:
        done = subprocess.run(["git", "-C", str(ROOT), *arguments], capture_output=True,
                              check=False)
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip().splitlines()
            raise SystemExit(f"--baseline {revision}: git {arguments[0]} failed: "
                             f"{reason[-1] if reason else done.returncode}")
        return done.stdout

    commit = git("rev-parse", "--short", f"{revision}^{{commit}}").decode().strip()
    with tarfile.open(fileobj=io.BytesIO(git("archive", "--format=tar", commit))) as archive:
        archive.extractall(directory, filter="data")
    return commit
