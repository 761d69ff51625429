"""The effect ledger of DynamoDbRunStore: `EFFECT#<key>` items beside the run.

An effect write changes no run, so it carries the fence in its own request:
one `TransactWriteItems` of a ConditionCheck on the run's META (the same
incarnation, running at the writer's attempt; see `runs.running_at`)
and the effect's conditional put — only where no item is for `begin`, only
over a reserved one for `complete`. A superseded owner's write is refused and
the rules run again on the run as it is, which raises the contract's error.

The store hands each method the `Rounds` to decide on, starting from the run
it remembers when that predicts the owner's attempt: a reservation then costs
one request and no read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stores import transitions
from stores.base import StoreError
from stores.dynamodb.items import (
    EFFECT_PREFIX,
    META,
    Texts,
    key,
    names,
    owned_record,
    partition,
    record_item,
    s,
    text_of,
)
from stores.dynamodb.requests import ABSENT, Condition, Refused, Table, check_op, put_op
from stores.dynamodb.runs import Rounds, running_at
from stores.records import EffectRecord, EffectStatus, decode_record, encode_record

_RESERVED = Condition("#status = :reserved", names("status"),
                      {":reserved": s(EffectStatus.RESERVED.value)})


class EffectLedger:
    """Reads and writes a run's effect items (the caller holds the run's lock)."""

    def __init__(self, table: Table, texts: Texts) -> None:
        self._table = table
        self._texts = texts

    def effects(self, run_id: str) -> list[EffectRecord]:
        """The run's effects, oldest first (the caller checked that the run exists)."""
        effects: list[EffectRecord] = [
            owned_record(EffectRecord, item, self._texts,
                         f"effect {text_of(item, 'sk')!r} of run {run_id!r}")
            for item in self._table.query(partition(run_id), prefix=EFFECT_PREFIX)]
        return sorted(effects, key=lambda effect: (effect.created_at, effect.key))

    def begin(self, rounds: Rounds, key_: str, *, run_id: str, expected_attempt: int,
              at: datetime) -> EffectRecord:
        what = f"effect {key_!r} of run {run_id!r}"
        for stored in rounds:
            effect = transitions.reserve_effect(None if stored is None else stored.run,
                                                run_id, key_,
                                                expected_attempt=expected_attempt, at=at)
            if stored is None:  # reserve_effect raised RunNotFound: never reached
                break
            record = encode_record(effect)
            item = record_item(run_id, EFFECT_PREFIX + key_, record, self._texts,
                               status=effect.status.value)
            try:
                self._table.transact([
                    check_op(self._table.name, key(run_id, META),
                             running_at(stored, expected_attempt, rounds.owner)),
                    put_op(self._table.name, item, ABSENT)])
                return decode_record(EffectRecord, record)
            except Refused as refused:
                run_check, effect_put = refused.reasons
                if not run_check.failed and effect_put.failed and effect_put.item:
                    # The run passed its fence and the key exists: return it unchanged.
                    return owned_record(EffectRecord, effect_put.item, self._texts, what)
                rounds.refused(refused)
        raise AssertionError("unreachable: Rounds raises when it runs out")

    def complete(self, rounds: Rounds, key_: str, *, run_id: str, expected_attempt: int,
                 result: Any, at: datetime) -> None:
        sk = EFFECT_PREFIX + key_
        what = f"effect {key_!r} of run {run_id!r}"
        for stored in rounds:
            found = None if stored is None else self._table.get(key(run_id, sk))
            existing = None if found is None else owned_record(EffectRecord, found,
                                                               self._texts, what)
            try:
                updated = transitions.settle_effect(
                    None if stored is None else stored.run, run_id, key_,
                    expected_attempt=expected_attempt, result=result, at=at,
                    existing=existing)
            except StoreError:
                if rounds.confirm():
                    continue
                raise
            if updated is None or stored is None:
                if rounds.confirm():
                    continue
                return
            item = record_item(run_id, sk, encode_record(updated), self._texts,
                               status=updated.status.value)
            try:
                self._table.transact([
                    check_op(self._table.name, key(run_id, META),
                             running_at(stored, expected_attempt, rounds.owner)),
                    put_op(self._table.name, item, _RESERVED)])
                return
            except Refused as refused:
                rounds.refused(refused)
