"""How FileRunStore keeps run keys unique: a file per key naming its run.

`keys/<sha256(key)>.json` names the run created under the key. It is written
before the run's `run.json`, under the key's lock, so a crash between the two
leaves a file naming a run that does not exist (or, once another run took the
id, a run created under another key): such a file holds nothing, and the next
claim of the key replaces it. The run's record holds the same key, so a file
is believed only when its run's record agrees. Creating and deleting a keyed
run both take the key's lock before the run's, always in that order.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from stores.atomic_files import hashed_name, locked, make_dir, read_sealed, seal, write_atomic
from stores.base import CorruptRecord
from stores.records import RunRecord


class FileRunKeys:
    """The `keys` directory of a FileRunStore."""

    def __init__(self, store_path: Path, read_run: Callable[[str], RunRecord | None]) -> None:
        self._keys = store_path / "keys"
        self._read_run = read_run

    def _path(self, run_key: str) -> Path:
        return self._keys / hashed_name(run_key)

    @contextlib.contextmanager
    def locked(self, run_key: str | None) -> Iterator[None]:
        """Hold the key's lock (nothing for a run without a key)."""
        if run_key is None:
            yield
            return
        make_dir(self._keys)
        with locked(self._path(run_key).with_suffix(".lock"), shared=False, create=True):
            yield

    def holder(self, run_key: str) -> str | None:
        """The id of the stored run created under `run_key`, or None."""
        path = self._path(run_key)
        stored = read_sealed(path)
        if stored is None:
            return None
        try:
            run_id = json.loads(stored[1])["run_id"]
        except (ValueError, TypeError, KeyError) as error:
            raise CorruptRecord(f"{path}: not a run key file ({type(error).__name__})") from None
        if not isinstance(run_id, str):
            raise CorruptRecord(f"{path}: run_id is not text")
        try:
            run = self._read_run(run_id)
        except ValueError:  # an id this store cannot hold names no run of it
            raise CorruptRecord(f"{path}: names run {run_id[:80]!r}, "
                                f"which this store cannot hold") from None
        return run_id if run is not None and run.run_key == run_key else None

    def claim(self, run_key: str, run_id: str) -> None:
        """Name `run_id` as the key's run (the caller holds the key's lock)."""
        write_atomic(self._path(run_key), seal(json.dumps({"run_id": run_id}), {}))

    def release(self, run_key: str, run_id: str) -> None:
        """Forget the key of a deleted run, and its lock (the caller holds it)."""
        path = self._path(run_key)
        stored = read_sealed(path)
        if stored is not None and json.loads(stored[1]).get("run_id") == run_id:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            # Unlinked while held: a waiter notices and locks the next file.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path.with_suffix(".lock"))
