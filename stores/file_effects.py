"""How FileRunStore keeps a run's effect ledger: one file per effect, counted in run.json.

    runs/<run_id>/effects/<sha256(key)>.json    header {"run_id", "n"}, the EffectRecord

Effects are numbered 1, 2, ... in the order they are reserved; `run.json`
commits how many there are (its `effects`), written after the effect's file.
So a file numbered above the count is an effect whose reservation never
committed (its process died before dispatching it): it reads as absent and
`sweep` removes it. A counted effect whose file is gone is `CorruptRecord`,
never absence: reserving its key again would run the effect twice. Every file
must name its run, and its name must be its key's hash.
"""

from __future__ import annotations

import os
from pathlib import Path

from stores.atomic_files import (
    decode_body,
    hashed_name,
    is_temp,
    listed,
    meta_field,
    read_sealed,
    seal,
    write_atomic,
)
from stores.base import CorruptRecord
from stores.records import EffectRecord


class EffectLedger:
    """The effects of one run, `committed` of them counted (the caller holds its lock)."""

    def __init__(self, folder: Path, run_id: str, committed: int) -> None:
        self.folder = folder
        self.run_id = run_id
        self.committed = committed

    def _read(self, name: str) -> tuple[int, EffectRecord] | None:
        """The number and record of an effect file, checked against where it sits."""
        path = self.folder / name
        found = read_sealed(path)
        if found is None:
            return None
        meta, body, _ = found
        number = meta_field(meta, "n", int, path)
        effect = decode_body(EffectRecord, path, body)
        if meta_field(meta, "run_id", str, path) != self.run_id or effect.run_id != self.run_id:
            raise CorruptRecord(f"{path}: holds an effect of run {effect.run_id!r}")
        if hashed_name(effect.key) != name:
            raise CorruptRecord(f"{path}: holds effect {effect.key!r}, stored under another key")
        return number, effect

    def _found(self, key: str) -> tuple[int, EffectRecord] | None:
        found = self._read(hashed_name(key))
        return None if found is None or found[0] > self.committed else found

    def get(self, key: str) -> EffectRecord | None:
        """The committed effect stored under `key`, or None."""
        found = self._found(key)
        return None if found is None else found[1]

    def number_of(self, key: str) -> int:
        found = self._found(key)
        if found is None:
            raise CorruptRecord(f"{self.folder / hashed_name(key)}: effect {key!r} is missing")
        return found[0]

    def write(self, key: str, text: str, number: int) -> None:
        write_atomic(self.folder / hashed_name(key),
                     seal(text, {"run_id": self.run_id, "n": number}))

    def _names(self) -> list[str]:
        return [name for name in listed(self.folder) if not is_temp(name)]

    def effects(self) -> list[EffectRecord]:
        """Every committed effect, which must be all of those counted."""
        numbered: dict[int, EffectRecord] = {}
        for name in self._names():
            found = self._read(name)
            if found is None or found[0] > self.committed:
                continue  # removed meanwhile, or never committed
            number, effect = found
            if number < 1 or number in numbered:
                raise CorruptRecord(f"{self.folder / name}: effect number {number} is "
                                    "not its own")
            numbered[number] = effect
        if len(numbered) != self.committed:
            missing = min(set(range(1, self.committed + 1)) - set(numbered))
            raise CorruptRecord(f"{self.folder}: effect {missing} of the {self.committed} "
                                f"run {self.run_id!r} counts is missing")
        return list(numbered.values())

    def check_whole(self) -> None:
        """`CorruptRecord` unless every counted effect is there (cheap when the count
        of files says so)."""
        if len(self._names()) != self.committed:
            self.effects()

    def sweep(self) -> None:
        """Remove effect files whose reservation never committed."""
        names = self._names()
        if len(names) <= self.committed:
            return
        for name in names:
            found = self._read(name)
            if found is not None and found[0] > self.committed:
                os.unlink(self.folder / name)
