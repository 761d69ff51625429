"""Which tool call or webhook step an effect key belongs to, for people reading effects.

An effect record holds its key, not what made it: a tool call's key is in the
transcript next to the tool's name and step, and a webhook's key is the run id
and its step path (unless the step set its own). The CLI's `effects` and the
API's effects route both answer with these names.
"""

from __future__ import annotations

from typing import NamedTuple

from stores.base import RunStore
from stores.records import RunRecord

WEBHOOK = "webhook"


class EffectOwner(NamedTuple):
    tool: str | None  # a tool's name, "webhook", or None when not known
    step_path: str | None


def effect_owners(store: RunStore, record: RunRecord) -> dict[str, EffectOwner]:
    """Effect key -> its owner, for the tool calls the latest checkpoint's transcript records."""
    owners: dict[str, EffectOwner] = {}
    checkpoint = store.load_latest_checkpoint(record.run_id)
    for item in checkpoint.transcript if checkpoint is not None else []:
        for part in item.get("content") or []:
            call = part.get("call") if isinstance(part, dict) else None
            if isinstance(call, dict) and isinstance(call.get("idempotencyKey"), str):
                step_path = item.get("step_path")
                owners[call["idempotencyKey"]] = EffectOwner(
                    str(call.get("name")), step_path if isinstance(step_path, str) else None)
    return owners


def owner_of(key: str, owners: dict[str, EffectOwner], run_id: str) -> EffectOwner:
    """The owner of effect `key`: a recorded tool call's, else a webhook step's by the
    key's shape, else unknown."""
    if key in owners:
        return owners[key]
    prefix = f"{run_id}:"
    if key.startswith(prefix):
        return EffectOwner(WEBHOOK, key[len(prefix):])
    return EffectOwner(None, None)


__all__ = ["EffectOwner", "effect_owners", "owner_of"]
