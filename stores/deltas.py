"""Checkpoints stored as deltas, so storage grows with the work, not its square.

The engine only appends to a checkpoint's append-only lists
(`records.APPEND_ONLY_FIELDS`: step results, transcript, artifacts, events). A stored
checkpoint body therefore keeps, for each list, how many entries it keeps from
the previous checkpoint (`base`) plus only the new entries (a list that did
not change is left out). A checkpoint whose lists do not extend the previous
ones is stored with `base` 0, in full. The "head" (every other field) holds
only the fields that differ from the previous checkpoint's: run id, attempt,
manifest hash, versions and variables are written when they change (the
variables as a delta where that is shorter), the cursor, budget and time every
time (a cursor frame with an empty continuation leaves it out). What a store
relies on is only the contract's promise that saved entries are never mutated
in place (the engine appends new entries; it never edits old ones).

Loading folds the bodies of a run in seq order. Every store uses this module;
what differs between stores is only where the bodies live.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pydantic_core
from pydantic import BaseModel, TypeAdapter, ValidationError

from stores.records import APPEND_ONLY_FIELDS, ArtifactRef, Checkpoint, Frame, JsonObject

BODY_FORMAT = "checkpoint-delta/1"
# A body whose variables are a change to the previous body's: which variables
# were set (their new values) and which were removed. Written only when the
# variables changed and the change is shorter than they are (not when every
# variable was set anew), so a body of the first format stays readable by
# older code.
VARIABLES_DELTA_FORMAT = "checkpoint-delta/2"
# A variables delta some of whose values are the output of a step result the
# same body adds (`outputs`: [path, index] pairs, the path a variable or a key
# of a variable's object, the index among the body's new step results): the
# value is stored once, in the step result. A step's `outputVariable` holds its
# output, a loop's `loop.outputs` its output list, and a long loop's output is
# the longest value of a run: written out each time, its final checkpoint
# would hold it three times.
SHARED_OUTPUTS_FORMAT = "checkpoint-delta/3"
_FORMATS = (BODY_FORMAT, VARIABLES_DELTA_FORMAT, SHARED_OUTPUTS_FORMAT)
_DELTA_FORMATS = (VARIABLES_DELTA_FORMAT, SHARED_OUTPUTS_FORMAT)
_LIST_FIELDS: set[str] = set(APPEND_ONLY_FIELDS)


# Head fields that rarely change: left out of a body when equal to the previous one.
_STABLE_FIELDS = ("run_id", "attempt", "manifest_hash", "contract_version", "runtime_version",
                  "variables")


@dataclass
class SavedLists:
    """What the next body is encoded against: the last saved checkpoint of a run.

    `lists` refers to the saved checkpoint's own lists, not copies; `counts`
    says how many of their entries were saved, so a list its owner appended
    to since is still read as it was saved."""

    seq: int
    lists: dict[str, list[Any]]
    stable: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, name: str) -> int:
        return self.counts.get(name, len(self.lists.get(name, [])))


def _list_items(checkpoint: Checkpoint, name: str) -> list[Any]:
    items: list[Any] = getattr(checkpoint, name)
    if name == "artifacts":
        return [item.model_dump(mode="json") for item in items]
    return items


def _extends(items: list[Any], before: list[Any], count: int) -> bool:
    """Whether `items` starts with the entries of `before`.

    The engine's checkpoints share the entries of its own append-only lists,
    and saved entries are never replaced (the contract), so the same first and
    last saved objects at their places mean the same prefix: a check in
    constant time, where comparing every entry would make each save cost more
    than the one before. Entries that are not the same objects (a checkpoint
    loaded back, or built by other code) are compared by value."""
    if len(items) < count:
        return False
    if count == 0 or (items[0] is before[0] and items[count - 1] is before[count - 1]):
        return True
    return items[:count] == before[:count]


def encode_body(checkpoint: Checkpoint, previous: SavedLists | None) -> tuple[str, SavedLists]:
    """The stored body of `checkpoint` relative to `previous` (the checkpoint at seq - 1)."""
    if previous is not None and previous.seq != checkpoint.seq - 1:
        previous = None
    lists: dict[str, Any] = {}
    saved: dict[str, list[Any]] = {}
    counts: dict[str, int] = {}
    fields = checkpoint.__dict__  # read directly: once per list and head field, every save
    for name in APPEND_ONLY_FIELDS:
        items = _list_items(checkpoint, name) if name == "artifacts" else fields[name]
        saved[name] = items
        counts[name] = size = len(items)
        base = 0
        if previous is not None:
            before_count = previous.count(name)
            if _extends(items, previous.lists.get(name, []), before_count):
                base = before_count
                if base == size:
                    continue  # unchanged: nothing to store
        lists[name] = {"base": base, "items": items[base:]}
    stable = {name: fields[name] for name in _STABLE_FIELDS}
    exclude = set(_LIST_FIELDS)
    variables_delta = None
    if previous is not None:
        before_stable = previous.stable
        for name, value in stable.items():
            if name in before_stable and before_stable[name] == value:
                exclude.add(name)
        before = before_stable.get("variables")
        if "variables" not in exclude and isinstance(before, dict):
            # Most commit points change a variable or two (a step's output, a
            # loop's item) among many (a loop's whole source list): only those.
            variables_delta = _variables_delta(before, stable["variables"])
            _share_outputs(variables_delta, lists.get("step_results"))
            if _replaces_all(variables_delta, stable["variables"]):
                variables_delta = None  # the variables themselves are shorter
            else:
                exclude.add("variables")
    head = _head_json(checkpoint, exclude)
    # pydantic's Rust encoder for the new entries too: the same JSON as the
    # json module, several times faster on the hot path.
    encoded_lists = pydantic_core.to_json(lists).decode()
    if variables_delta is None:
        body = f'{{"format":"{BODY_FORMAT}","head":{head},"lists":{encoded_lists}}}'
    else:
        kind = SHARED_OUTPUTS_FORMAT if "outputs" in variables_delta else VARIABLES_DELTA_FORMAT
        body = (f'{{"format":"{kind}","head":{head},'
                f'"variables":{pydantic_core.to_json(variables_delta).decode()},'
                f'"lists":{encoded_lists}}}')
    return body, SavedLists(seq=checkpoint.seq, lists=saved, stable=stable, counts=counts)


# A head's fields, in the checkpoint's order; a frame's, a budget's.
_HEAD_FIELDS = tuple(name for name in Checkpoint.model_fields if name not in _LIST_FIELDS)
_FRAME_FIELDS = tuple(Frame.model_fields)


def _head_json(checkpoint: Checkpoint, excluded: set[str]) -> str:
    """The head: the checkpoint's fields but `excluded`, as pydantic writes the record
    with `exclude_none`, and with no `continuation` in a cursor frame that has none
    (the frame of a step not yet started, or past a sequence's end: read back
    without one, it gets an empty one, the field's default).

    Built as plain data and encoded by pydantic's Rust encoder in one call, to the
    same text `model_dump_json(exclude=..., exclude_none=True)` writes (NaN as null,
    as the records' config says): on every save, pydantic applying the exclusions
    cost more than the encoding itself."""
    fields = checkpoint.__dict__
    head: dict[str, Any] = {}
    for name in _HEAD_FIELDS:
        if name in excluded:
            continue
        value = fields[name]
        if name == "cursor":
            value = [_frame_data(frame) for frame in value]
        elif isinstance(value, BaseModel):  # the budget
            value = {key: item for key, item in value.__dict__.items() if item is not None}
        elif value is None:
            continue
        head[name] = value
    return pydantic_core.to_json(head, inf_nan_mode="null").decode()


def _frame_data(frame: Frame) -> dict[str, Any]:
    fields = frame.__dict__
    return {name: fields[name] for name in _FRAME_FIELDS
            if fields[name] is not None and (fields[name] or name != "continuation")}


def _replaces_all(delta: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether a variables delta sets every variable and shares no output: then it
    is the variables themselves with more around them (a loop's scalar counter,
    the only variable, changes at every commit point)."""
    return "outputs" not in delta and not delta["unset"] and len(delta["set"]) == len(after)


def _variables_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The variables set (with their values) and removed between two checkpoints.
    A value that is the same object is unchanged: the engine replaces a variable's
    value, it never changes one in place."""
    changed = {key: value for key, value in after.items()
               if key not in before or (before[key] is not value and before[key] != value)}
    return {"set": changed, "unset": [key for key in before if key not in after]}


# The values a body shares with a step result's output (a tuple, not `list | dict |
# str`: that union is built anew each time it is evaluated, per entry of every save).
_SHAREABLE = (list, dict, str)


def _share_outputs(delta: dict[str, Any], step_results: dict[str, Any] | None) -> None:
    """Write a set variable, or a key of a set variable's object, whose value is the
    very object a new step result holds as its output as a reference to that result
    (`SHARED_OUTPUTS_FORMAT`). Only containers and strings: a number costs less
    than its reference. The engine never changes a value in place, so the same
    object is the same value."""
    if not step_results or not delta["set"]:
        return
    produced = {id(entry["output"]): index for index, entry in enumerate(step_results["items"])
                if isinstance(entry, dict) and isinstance(entry.get("output"), _SHAREABLE)}
    if not produced:
        return
    shared: list[list[Any]] = []
    for name, value in list(delta["set"].items()):
        if id(value) in produced:
            shared.append([[name], produced[id(value)]])
            del delta["set"][name]
        elif isinstance(value, dict) and any(id(inner) in produced for inner in value.values()):
            kept = {}
            for key, inner in value.items():
                if id(inner) in produced:
                    shared.append([[name, key], produced[id(inner)]])
                else:
                    kept[key] = inner
            delta["set"][name] = kept
    if shared:
        delta["outputs"] = shared


def _apply_shared_outputs(head: dict[str, Any], delta: Any, part: Any,
                          entries: list[Any]) -> None:
    """Set the variables (or keys of them) a body stores as references to its new step
    results' outputs (`entries`: the step results after the body's were appended)."""
    outputs = delta.get("outputs") if isinstance(delta, dict) else None
    items = part.get("items") if isinstance(part, dict) else None
    if not isinstance(outputs, list) or not isinstance(items, list):
        raise DeltaFormatError(f"checkpoint {head.get('seq')} has malformed shared outputs")
    new = entries[len(entries) - len(items):]
    variables = head["variables"]
    for reference in outputs:
        path, index = reference if isinstance(reference, list) and len(reference) == 2 \
            else (None, None)
        if not isinstance(path, list) or not 1 <= len(path) <= 2 \
                or not all(isinstance(step, str) for step in path):
            raise DeltaFormatError(f"checkpoint {head.get('seq')} has a malformed shared "
                                   f"output {reference!r}")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(new) \
                or not isinstance(new[index], dict) or "output" not in new[index]:
            raise DeltaFormatError(f"checkpoint {head.get('seq')} shares variable "
                                   f"{'.'.join(path)!r} with no step result output {index!r}")
        if len(path) == 1:
            variables[path[0]] = new[index]["output"]
        elif isinstance(variables.get(path[0]), dict):
            variables[path[0]][path[1]] = new[index]["output"]
        else:
            raise DeltaFormatError(f"checkpoint {head.get('seq')} shares a key of variable "
                                   f"{path[0]!r}, which is not an object")


def _apply_variables_delta(head: dict[str, Any], delta: Any) -> None:
    base = head.get("variables")
    if not isinstance(delta, dict) or not isinstance(base, dict) \
            or not isinstance(delta.get("set"), dict) or not isinstance(delta.get("unset"), list):
        raise DeltaFormatError(f"checkpoint {head.get('seq')} has a malformed variables delta "
                               "or no variables before it")
    variables = {**base, **delta["set"]}
    for key in delta["unset"]:
        variables.pop(key, None)
    head["variables"] = variables


class DeltaFormatError(ValueError):
    pass


def _folded(bodies: Iterable[str | bytes]) -> Iterator[tuple[dict[str, Any], dict[str, list[Any]]]]:
    """The head and lists after each body, in order: one pass over the bodies.

    The lists are the fold's own, changed by the next body: a caller keeps copies."""
    head: dict[str, Any] | None = None
    lists: dict[str, list[Any]] = {name: [] for name in APPEND_ONLY_FIELDS}
    for body in bodies:
        try:
            decoded = json.loads(body)
        except ValueError as error:
            raise DeltaFormatError(f"checkpoint body is not JSON: {error}") from error
        if not isinstance(decoded, dict) or decoded.get("format") not in _FORMATS:
            raise DeltaFormatError("checkpoint body has an unknown format")
        part_head = decoded.get("head")
        parts = decoded.get("lists")
        if not isinstance(part_head, dict) or not isinstance(parts, dict):
            raise DeltaFormatError("checkpoint body lacks its head or lists")
        # A head holds only what changed since the previous checkpoint.
        head = part_head if head is None else {**head, **part_head}
        if decoded["format"] in _DELTA_FORMATS:
            _apply_variables_delta(head, decoded.get("variables"))
        for name in APPEND_ONLY_FIELDS:
            part = parts.get(name)
            if part is None:
                continue  # the list did not change
            if not isinstance(part, dict):
                raise DeltaFormatError(f"checkpoint body has a malformed {name} delta")
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
        if decoded["format"] == SHARED_OUTPUTS_FORMAT:
            _apply_shared_outputs(head, decoded.get("variables"), parts.get("step_results"),
                                  lists["step_results"])
        yield head, lists


def folded_events(bodies: Iterable[str | bytes]) -> list[Any]:
    """The event log after the last of `bodies` (every body of a run from seq 1, in seq
    order), without assembling the checkpoints: the events list alone, folded as
    `_folded` folds every list."""
    events: list[Any] = []
    for body in bodies:
        try:
            decoded = json.loads(body)
        except ValueError as error:
            raise DeltaFormatError(f"checkpoint body is not JSON: {error}") from error
        if not isinstance(decoded, dict) or decoded.get("format") not in _FORMATS \
                or not isinstance(decoded.get("lists"), dict):
            raise DeltaFormatError("checkpoint body has an unknown format")
        part = decoded["lists"].get("events")
        if part is None:
            continue
        base = part.get("base") if isinstance(part, dict) else None
        items = part.get("items") if isinstance(part, dict) else None
        if not isinstance(base, int) or isinstance(base, bool) or not 0 <= base <= len(events) \
                or not isinstance(items, list):
            raise DeltaFormatError("checkpoint body has a malformed events delta")
        del events[base:]
        events.extend(items)
    return events


def _checkpoint(head: dict[str, Any], lists: dict[str, list[Any]]) -> Checkpoint:
    try:
        # Validation copies the lists, so the fold may go on changing its own.
        return Checkpoint.model_validate({**head, **lists})
    except ValidationError as error:
        raise DeltaFormatError(f"checkpoint body is not a valid checkpoint: {error}") from error


def assemble(bodies: Iterable[str | bytes]) -> tuple[Checkpoint, SavedLists]:
    """The checkpoint of the last body, from every body of the run up to it, in seq order."""
    last = deque(_folded(bodies), maxlen=1)
    if not last:
        raise DeltaFormatError("no checkpoint bodies to assemble")
    checkpoint = _checkpoint(*last[0])
    stable = {name: getattr(checkpoint, name) for name in _STABLE_FIELDS}
    # The checkpoint's own entries, so a caller that resumes from this
    # checkpoint hands the same objects back and the next save is a delta
    # found in constant time.
    saved = {name: _list_items(checkpoint, name) for name in APPEND_ONLY_FIELDS}
    return checkpoint, SavedLists(seq=checkpoint.seq, lists=saved, stable=stable,
                                  counts={name: len(items) for name, items in saved.items()})


def assemble_each(bodies: Iterable[str | bytes], *, first: int) -> Iterator[Checkpoint]:
    """The checkpoint of every body from the `first`-th on (bodies from seq 1, in seq
    order), each body read once: a range of checkpoints costs one fold, not one per
    checkpoint. An entry of the append-only lists is validated once and shared by the
    checkpoints that hold it (entries are never changed in place: the contract)."""
    raw: dict[str, list[Any]] = {name: [] for name in APPEND_ONLY_FIELDS}
    valid: dict[str, list[Any]] = {name: [] for name in APPEND_ONLY_FIELDS}
    for number, (head, lists) in enumerate(_folded(bodies), start=1):
        if number < first:
            continue
        checkpoint = _checkpoint(head, {name: [] for name in APPEND_ONLY_FIELDS})
        for name, entries in lists.items():
            kept = len(raw[name])
            # The fold replaces entries only with new objects (from json.loads), so the
            # last entry validated still in its place means every earlier one is too.
            if kept and (kept > len(entries) or entries[kept - 1] is not raw[name][-1]):
                kept = 0
            added = entries[kept:]
            raw[name][kept:] = added
            valid[name][kept:] = _validated_entries(name, added, head)
        yield checkpoint.model_copy(update={name: list(items) for name, items in valid.items()})


# Each append-only list's type, as the checkpoint declares it.
_ENTRIES: dict[str, TypeAdapter[Any]] = {
    "step_results": TypeAdapter(list[JsonObject]), "transcript": TypeAdapter(list[JsonObject]),
    "artifacts": TypeAdapter(list[ArtifactRef]), "events": TypeAdapter(list[JsonObject])}


def _validated_entries(name: str, entries: list[Any], head: dict[str, Any]) -> list[Any]:
    try:
        validated: list[Any] = _ENTRIES[name].validate_python(entries)
    except ValidationError as error:
        raise DeltaFormatError(f"checkpoint {head.get('seq')} has a malformed {name} entry: "
                               f"{error}") from error
    return validated


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

    def newer_than(self, run_id: str, seq: int) -> bool:
        """Whether the lists kept for the run are of a checkpoint after `seq`."""
        entry = self._entries.get(run_id)
        return entry is not None and entry.seq > seq

    def forget(self, run_id: str) -> None:
        self._entries.pop(run_id, None)
