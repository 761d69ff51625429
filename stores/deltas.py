"""Checkpoints stored as deltas, so storage grows with the work, not its square.

The engine only appends to a checkpoint's append-only lists
(`records.APPEND_ONLY_FIELDS`: step results, transcript, artifacts). A stored
checkpoint body therefore keeps the small "head" (cursor, variables, budget)
in full and, for each list, how many entries it keeps from the previous
checkpoint (`base`) plus only the new entries. A checkpoint whose lists do not
extend the previous ones is stored with `base` 0, in full. What a store
relies on is only the contract's promise that saved entries are never mutated
in place (the engine appends new entries; it never edits old ones).

Loading folds the bodies of a run in seq order. Every store uses this module;
what differs between stores is only where the bodies live.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from stores.records import APPEND_ONLY_FIELDS, Checkpoint

BODY_FORMAT = "checkpoint-delta/1"
_LIST_FIELDS: set[str] = set(APPEND_ONLY_FIELDS)


@dataclass
class SavedLists:
    """The append-only lists of the last checkpoint a store saved for a run."""

    seq: int
    lists: dict[str, list[Any]]


def _list_items(checkpoint: Checkpoint, name: str) -> list[Any]:
    items = getattr(checkpoint, name)
    if name == "artifacts":
        return [item.model_dump(mode="json") for item in items]
    return list(items)


def encode_body(checkpoint: Checkpoint, previous: SavedLists | None) -> tuple[str, SavedLists]:
    """The stored body of `checkpoint` relative to `previous` (the checkpoint at seq - 1)."""
    if previous is not None and previous.seq != checkpoint.seq - 1:
        previous = None
    lists: dict[str, Any] = {}
    saved: dict[str, list[Any]] = {}
    for name in APPEND_ONLY_FIELDS:
        items = _list_items(checkpoint, name)
        base = 0
        if previous is not None:
            before = previous.lists.get(name, [])
            # Element comparison is cheap when the engine passes the same
            # objects again (the identity shortcut of list equality), which
            # it does: its checkpoints share the entries of its own lists.
            if len(items) >= len(before) and items[: len(before)] == before:
                base = len(before)
        lists[name] = {"base": base, "items": items[base:]}
        saved[name] = items
    # The head through pydantic's own encoder: the hot path of every save.
    head = checkpoint.model_dump_json(exclude=_LIST_FIELDS)
    body = (f'{{"format":"{BODY_FORMAT}","head":{head},'
            f'"lists":{json.dumps(lists, separators=(",", ":"), ensure_ascii=False)}}}')
    return body, SavedLists(seq=checkpoint.seq, lists=saved)


class DeltaFormatError(ValueError):
    pass


def _fold(bodies: Iterable[str | bytes]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    head: dict[str, Any] | None = None
    lists: dict[str, list[Any]] = {name: [] for name in APPEND_ONLY_FIELDS}
    for body in bodies:
        try:
            decoded = json.loads(body)
        except ValueError as error:
            raise DeltaFormatError(f"checkpoint body is not JSON: {error}") from error
        if not isinstance(decoded, dict) or decoded.get("format") != BODY_FORMAT:
            raise DeltaFormatError("checkpoint body has an unknown format")
        head = decoded.get("head")
        parts = decoded.get("lists")
        if not isinstance(head, dict) or not isinstance(parts, dict):
            raise DeltaFormatError("checkpoint body lacks its head or lists")
        for name in APPEND_ONLY_FIELDS:
            part = parts.get(name)
            if not isinstance(part, dict):
                raise DeltaFormatError(f"checkpoint body lacks its {name} delta")
            base, items = part.get("base"), part.get("items")
            if not isinstance(base, int) or isinstance(base, bool) or base < 0 \
                    or not isinstance(items, list):
                raise DeltaFormatError(f"checkpoint body has a malformed {name} delta")
            if base > len(lists[name]):
                raise DeltaFormatError(
                    f"checkpoint {head.get('seq')} extends {base} {name} entries; only "
                    f"{len(lists[name])} precede it"
                )
            del lists[name][base:]
            lists[name].extend(items)
    if head is None:
        raise DeltaFormatError("no checkpoint bodies to assemble")
    return head, lists


def assemble(bodies: Iterable[str | bytes]) -> tuple[Checkpoint, SavedLists]:
    """The checkpoint of the last body, from every body of the run up to it, in seq order."""
    head, lists = _fold(bodies)
    try:
        checkpoint = Checkpoint.model_validate({**head, **lists})
    except ValidationError as error:
        raise DeltaFormatError(f"checkpoint body is not a valid checkpoint: {error}") from error
    return checkpoint, SavedLists(seq=checkpoint.seq, lists=lists)


class SavedListsCache:
    """The last saved lists per run, bounded, so a save compares without a read."""

    def __init__(self, capacity: int = 64) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, SavedLists] = OrderedDict()

    def get(self, run_id: str, seq: int) -> SavedLists | None:
        entry = self._entries.get(run_id)
        if entry is None or entry.seq != seq:
            return None
        self._entries.move_to_end(run_id)
        return entry

    def put(self, run_id: str, saved: SavedLists) -> None:
        self._entries[run_id] = saved
        self._entries.move_to_end(run_id)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def forget(self, run_id: str) -> None:
        self._entries.pop(run_id, None)
