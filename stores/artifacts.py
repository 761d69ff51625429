"""LocalArtifactStore: content-addressed artifact bytes in a directory.

An artifact is stored once under its sha256 (`<dir>/<aa>/<sha256>`), written
to a temporary file and renamed, so a retried tool call that saves the same
bytes again changes nothing. Reads verify the hash: damaged bytes raise
`CorruptRecord`, never come back silently.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from stores.base import CorruptRecord


class LocalArtifactStore:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).resolve()
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, sha256: str) -> Path:
        return self.directory / sha256[:2] / sha256

    def put(self, data: bytes, *, media_type: str) -> tuple[str, str]:
        """Store bytes; return (uri, sha256). `media_type` is kept by the caller's ref."""
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if not path.exists():
            path.parent.mkdir(mode=0o700, exist_ok=True)
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

    def get(self, uri: str) -> bytes:
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            raise ValueError(f"not a local artifact uri: {uri!r}")
        path = Path(unquote(parsed.path))
        if path.parent.parent != self.directory:
            raise ValueError(f"{uri!r} is not in this artifact store ({self.directory})")
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != path.name:
            raise CorruptRecord(f"artifact {path} does not match its sha256")
        return data
