"""Crash-safe files for `FileRunStore`: sealed envelopes, atomic replace, run locks.

A stored file is one header line and a body:

    arf1 <size> <sha256> <meta JSON>\\n<body>

With a store key (`stores.codecs`), the tag names the codec beside the
format, `arf1+aesgcm1`, and the body is the codec's output (nonce, ciphertext
and tag) instead of the JSON; the header's meta holds ids and counters only.

`sha256` covers the canonical meta JSON, a newline and the body, so a flipped
byte anywhere except in the format tag or `size` (which are checked on their
own) fails the checksum; `size` catches a truncated or torn file. The header
is plain words rather than JSON because every checkpoint file carries one: it
is most of a small checkpoint's fixed cost on disk. Reading never repairs:
every defect is a `CorruptRecord` naming the file.

Writes go to a temp file in the target's directory, are fsynced, renamed onto
the target with `os.replace` and the directory is fsynced, so a reader sees the
old file or the new one, never a mix, and the rename survives a power cut.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from stores.base import CorruptRecord, StoreUnavailable
from stores.codecs import open_bytes, seal_bytes
from stores.records import RecordDecodeError, decode_record, dumps

FORMAT = "arf1"  # agent-runtime file, version 1
_TEMP_SUFFIX = ".tmp"
_M = TypeVar("_M", bound=BaseModel)


def _digest(meta_line: bytes, body: bytes) -> str:
    return hashlib.sha256(meta_line + b"\n" + body).hexdigest()


def seal(body: str, meta: Mapping[str, Any]) -> bytes:
    """The stored bytes of `body` with its `meta` (small JSON scalars) and checksum,
    the body through the configured codec."""
    codec, data = seal_bytes(body.encode())
    meta_line = dumps(dict(meta)).encode()
    tag = FORMAT if codec is None else f"{FORMAT}+{codec}"
    header = f"{tag} {len(data)} {_digest(meta_line, data)} ".encode()
    return header + meta_line + b"\n" + data


def unseal(path: Path, data: bytes) -> tuple[dict[str, Any], str]:
    """The (meta, body) of stored bytes, or `CorruptRecord` naming `path`."""
    head, newline, body = data.partition(b"\n")
    if not newline:
        raise CorruptRecord(f"{path}: no header line ({len(data)} bytes; truncated?)")
    parts = head.split(b" ", 3)
    tag, _, codec_name = parts[0].partition(b"+")
    if len(parts) != 4 or tag != FORMAT.encode():
        raise CorruptRecord(f"{path}: not an agent-runtime {FORMAT} file")
    size_text, digest, meta_line = parts[1], parts[2].decode("ascii", "replace"), parts[3]
    if not size_text.isdigit():
        raise CorruptRecord(f"{path}: header size {size_text!r} is not a number")
    if len(body) != int(size_text):
        raise CorruptRecord(
            f"{path}: body is {len(body)} bytes, header says {int(size_text)} "
            "(truncated or torn write)")
    if _digest(meta_line, body) != digest:
        raise CorruptRecord(f"{path}: checksum mismatch")
    try:
        meta = json.loads(meta_line)
    except ValueError as error:
        raise CorruptRecord(f"{path}: header meta is not JSON ({error})") from error
    if not isinstance(meta, dict):
        raise CorruptRecord(f"{path}: header meta is not an object")
    codec = codec_name.decode("ascii", "replace") or None
    try:
        return meta, open_bytes(codec, body, str(path)).decode()
    except UnicodeDecodeError as error:
        raise CorruptRecord(f"{path}: body is not UTF-8 ({error})") from error


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes, or None when it (or its directory) does not exist."""
    try:
        with path.open("rb") as file:
            return file.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


Sealed = tuple[dict[str, Any], str, int]  # meta, body, bytes on disk


def read_sealed(path: Path) -> Sealed | None:
    """A sealed file's meta, body and stored size; None when it does not exist."""
    data = read_bytes(path)
    if data is None:
        return None
    meta, body = unseal(path, data)
    return meta, body, len(data)


def read_required(path: Path, what: str) -> Sealed:
    """A sealed file that must exist: its absence is corruption too."""
    found = read_sealed(path)
    if found is None:
        raise CorruptRecord(f"{path}: {what} is missing")
    return found


def decode_body(model: type[_M], path: Path, body: str) -> _M:
    try:
        return decode_record(model, body)
    except RecordDecodeError as error:
        raise CorruptRecord(f"{path}: {error}") from error


def meta_field(meta: dict[str, Any], name: str, kind: type, path: Path) -> Any:
    value = meta.get(name)
    if not isinstance(value, kind):
        raise CorruptRecord(f"{path}: header meta {name!r} is {value!r}, not a {kind.__name__}")
    return value


def listed(folder: Path) -> list[str]:
    """The entries of a directory a run must have; its absence is damage."""
    try:
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError) as error:
        raise CorruptRecord(f"{folder}: the directory is missing") from error


@contextlib.contextmanager
def reachable(root: Path) -> Iterator[None]:
    """Report an OS error in the block (permissions, I/O, a file where a directory
    belongs) as `StoreUnavailable` naming the file and the store."""
    try:
        yield
    except OSError as error:
        where = error.filename or root
        raise StoreUnavailable(f"{where}: {error.strerror or error} (store {root})") from error


def fsync_dir(path: Path) -> None:
    """Make entries created, renamed or removed in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def hashed_name(key: str) -> str:
    """A file name for any key: fixed length, no separators, nothing to escape."""
    return hashlib.sha256(key.encode()).hexdigest() + ".json"


def is_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(_TEMP_SUFFIX)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that no reader or crash ever sees a partial file."""
    # Same directory as the target: os.replace is atomic only within a filesystem.
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}{_TEMP_SUFFIX}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_dir(path.parent)


def make_dir(path: Path) -> None:
    """Create a private directory (and make its entry durable in the parent)."""
    path.mkdir(mode=0o700, exist_ok=True)
    fsync_dir(path.parent)


@contextlib.contextmanager
def locked(lock_path: Path, *, shared: bool, create: bool) -> Iterator[bool]:
    """Hold `flock` on `lock_path`; yield False, holding nothing, when it does not exist.

    The owner of an exclusive lock may unlink the lock file (when its run is
    deleted). Whoever was waiting on that file then holds a lock nobody else
    will ever take again, so after acquiring we check the path still names the
    file we locked and start over when it does not.
    """
    flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    while True:
        try:
            fd = os.open(lock_path, flags, 0o600)
        except FileNotFoundError:
            yield False
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                current = os.stat(lock_path)
            except FileNotFoundError:
                current = None
            if current is not None and (current.st_dev, current.st_ino) == (
                    held.st_dev, held.st_ino):
                yield True
                return
        finally:
            os.close(fd)  # closing the last descriptor releases the flock
