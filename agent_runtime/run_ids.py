"""Run ids, which sort by creation time, and the run keys of idempotent requests.

A run id is `run_` + 32 hex digits laid out as a UUIDv7 (RFC 9562), so
ordering runs by id (`list_runs(newest_first=True)`) is ordering them by
creation, for runs created with an `Idempotency-Key` too: the key maps to
the id in the store (a run's `run_key`), rather than the id deriving from it.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time

_id_lock = threading.Lock()
_id_clock = [0, 0]  # the last id's millisecond and counter


def generate_run_id() -> str:
    """`run_` + a UUIDv7: a 48-bit Unix millisecond timestamp, the version, a
    12-bit counter, the variant and 62 random bits. Ids sort by creation time,
    and within one process strictly (the counter orders ids of the same
    millisecond, method 1 of the RFC)."""
    with _id_lock:
        millis = max(time.time_ns() // 1_000_000, _id_clock[0])
        if millis == _id_clock[0]:
            counter = _id_clock[1] + 1
            if counter > 0xFFF:  # 4096 ids in one millisecond: borrow the next one
                millis, counter = millis + 1, secrets.randbits(10)
        else:
            counter = secrets.randbits(10)  # leaves room to count up within the millisecond
        _id_clock[:] = [millis, counter]
    value = ((millis & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | counter << 64
             | 0b10 << 62 | secrets.randbits(62))
    return f"run_{value:032x}"


def run_key(tenant: str, key: str) -> str:
    """The run key of (tenant, `Idempotency-Key`): sha256(tenant NUL key), hex. The
    store keeps it unique among runs (`RunStore.create_run`, `find_run_key`)."""
    return hashlib.sha256(f"{tenant}\0{key}".encode()).hexdigest()
