"""Where FileRunStore keeps a run, and what its `run.json` holds.

A run is the directory `runs/<run_id>/` (the id as it is, so it must be a
plain, visible directory name: `check_run_id`), with `run.json` and the
subdirectories `SUBDIRS`. `run.json` holds the run record and, in its header,
the store's bookkeeping (`RunFile`): the commit point of the checkpoints, the
incarnation, the number of committed effects. It must hold its directory's
run. A run directory without `run.json` is a create that crashed before its
commit while it holds nothing else; once the run's other files are there it
is damage (`check_remains`), never absence.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from stores.atomic_files import decode_body, is_temp, meta_field, read_sealed, seal
from stores.base import CorruptRecord
from stores.records import RunRecord, encode_record

MAX_RUN_ID_BYTES = 200  # leaves room under NAME_MAX (255) for temp-file names
SUBDIRS = ("checkpoints", "effects", "approvals")


def check_run_id(run_id: str) -> None:
    """Refuse ids that are not a plain, visible directory name."""
    problem = None
    if not run_id:
        problem = "is empty"
    elif run_id.startswith("."):
        problem = "starts with a dot"
    elif ".." in run_id:
        problem = "contains '..'"
    elif any(char in run_id for char in "/\\\0"):
        problem = "contains a path separator or NUL"
    elif len(run_id.encode("utf-8", "surrogatepass")) > MAX_RUN_ID_BYTES:
        problem = f"is longer than {MAX_RUN_ID_BYTES} bytes"
    if problem is not None:
        raise ValueError(f"run id {run_id!r} {problem}; FileRunStore cannot store it")


class RunFile(NamedTuple):
    """What `run.json` holds: the record, the commit point of its checkpoints, the
    incarnation (new for every create, so a cache entry never outlives a deleted run)
    and the number of committed effects."""

    run: RunRecord
    latest_seq: int
    incarnation: str
    effects: int = 0

    def sealed(self, run: RunRecord, *, latest_seq: int | None = None,
               effects: int | None = None) -> bytes:
        """The bytes of `run.json` committing `run` with this bookkeeping, moved as given."""
        meta = {"latest_seq": self.latest_seq if latest_seq is None else latest_seq,
                "incarnation": self.incarnation,
                "effects": self.effects if effects is None else effects}
        return seal(encode_record(run), meta)


def read_run_file(run_dir: Path, run_id: str) -> RunFile | None:
    """What the run's `run.json` holds, or None when the run does not exist."""
    path = run_dir / "run.json"
    found = read_sealed(path)
    if found is None:
        check_remains(run_dir)
        return None
    meta, body, _ = found
    run = decode_body(RunRecord, path, body)
    if run.run_id != run_id:
        raise CorruptRecord(f"{path}: holds run {run.run_id!r}")
    return RunFile(run, meta_field(meta, "latest_seq", int, path),
                   meta_field(meta, "incarnation", str, path),
                   meta_field(meta, "effects", int, path))


def check_remains(run_dir: Path) -> None:
    """For a run without run.json: the files it owns mean run.json went missing."""
    for sub in SUBDIRS:
        try:
            names = os.listdir(run_dir / sub)
        except (FileNotFoundError, NotADirectoryError):
            continue
        if any(not is_temp(name) for name in names):
            raise CorruptRecord(f"{run_dir / 'run.json'}: missing, but the run's {sub} remain")
