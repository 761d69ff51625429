"""LocalArtifactStore: a run's artifact bytes in a directory, content-addressed.

An artifact is stored under its run and its sha256
(`<dir>/runs/<run>/<sha256>`, `run_segment(run_id)`), written to a temporary
file and renamed, so a retried tool call that saves the same bytes again
changes nothing, and deleting the run (`delete_run`, what `agent-runtime gc`
calls) deletes exactly its artifacts. Reads verify the hash: damaged bytes
raise `CorruptRecord`, never come back silently. Artifacts written before runs
had directories (`<dir>/<aa>/<sha256>`, shared by runs) stay readable; gc
leaves them alone.

`run_of(uri)` says which run an artifact belongs to, so that the runtime can
refuse a run reading another run's artifact (`agent_runtime.steps.prompt_media`);
the store itself only stores. Its errors name the uri, never the store's
directory (a tenant sees them).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

from stores.base import CorruptRecord

RUNS_DIRECTORY = "runs"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def run_segment(run_id: str) -> str:
    """`run_id` as one path segment or S3 key segment: no '/', never '.' or '..'."""
    if not run_id:
        raise ValueError("an artifact or blob needs the id of its run")
    return quote(run_id, safe="").replace(".", "%2E")


class LocalArtifactStore:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).resolve()
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def run_directory(self, run_id: str) -> Path:
        return self.directory / RUNS_DIRECTORY / run_segment(run_id)

    def put(self, data: bytes, *, media_type: str, run_id: str) -> tuple[str, str]:
        """Store bytes for `run_id`; return (uri, sha256). `media_type` is kept by the
        caller's ref."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.run_directory(run_id) / digest
        if not path.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(temp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
                raise
        return path.as_uri(), digest

    def _path_of(self, uri: str) -> Path:
        """The file `uri` names; ValueError unless it is an artifact of this store."""
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            raise ValueError(f"not a local artifact uri: {uri!r}")
        path = Path(unquote(parsed.path))
        # A run's artifact, or one written before artifacts were kept per run
        # (`<dir>/<sha256[:2]>/<sha256>`). Compared as written: no `..` anywhere.
        legacy = path.parent.parent == self.directory and path.parent.name == path.name[:2]
        in_run = path.parent.parent == self.directory / RUNS_DIRECTORY \
            and path.parent.name not in ("", ".", "..")
        if not _SHA256.fullmatch(path.name) or not (legacy or in_run):
            raise ValueError(f"{uri!r} is not in this artifact store")
        return path

    def run_of(self, uri: str) -> str | None:
        """The run `uri`'s artifact belongs to (as `put` was told), or None for one
        written before artifacts were kept per run. ValueError for a uri of no artifact
        of this store."""
        path = self._path_of(uri)
        if path.parent.parent == self.directory:
            return None
        return unquote(path.parent.name)

    def get(self, uri: str) -> bytes:
        path = self._path_of(uri)
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != path.name:
            raise CorruptRecord(f"artifact {uri} does not match its sha256")
        return data

    def delete_run(self, run_id: str) -> int:
        """Delete the run's artifacts; return how many there were. Repeatable."""
        directory = self.run_directory(run_id)
        if not directory.is_dir():
            return 0
        count = sum(1 for entry in directory.iterdir() if not entry.name.startswith(".tmp-"))
        shutil.rmtree(directory)
        return count
