"""The optional `SettlesInCheckpoint` contract: effects settled and reserved with a
checkpoint, in one commit or not at all.

Only a backend that offers `save_checkpoint_settling` includes this suite
(beside `RunStoreConformance`); the engine checks for the method, and on a
store without it settles and checkpoints in two commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from stores.base import (
    CheckpointConflict,
    InvalidTransition,
    RunStore,
    RunTerminal,
    Settlement,
    SettlesInCheckpoint,
    StaleAttempt,
)
from stores.conformance.builders import (
    EFFECT_KEY,
    RUN,
    at,
    list_effects,
    make_checkpoint,
    observe,
    start_busy_run,
)
from stores.records import Checkpoint, EffectStatus


def _settling(store: RunStore) -> SettlesInCheckpoint:
    assert isinstance(store, SettlesInCheckpoint), "this suite is for stores that settle"
    return store


def _effect(store: RunStore, key: str) -> Any:
    effects = list_effects(store, RUN)
    assert effects is not None
    return next(effect for effect in effects if effect.key == key)


NEW_KEY = "effect-new"


def _refused(store: RunStore, error: type[Exception], checkpoint: Checkpoint, *,
             settlements: Sequence[Settlement] = (), reservations: Sequence[str] = (),
             expected_attempt: int = 1, seconds: float = 60) -> None:
    """`save_checkpoint_settling` raises `error` and changes nothing a caller can see."""
    before = observe(store)
    with pytest.raises(error):
        _settling(store).save_checkpoint_settling(
            checkpoint, settlements, reservations=reservations,
            expected_attempt=expected_attempt, at=at(seconds))
    assert observe(store) == before


class SettlementConformance:
    """`save_checkpoint_settling`: both writes land together, or neither does."""

    def test_settles_the_effects_and_saves_the_checkpoint(self, store: RunStore) -> None:
        start_busy_run(store)
        store.begin_effect("effect-2", run_id=RUN, expected_attempt=1, at=at(51))
        _settling(store).save_checkpoint_settling(
            make_checkpoint(RUN, 2, 1),
            [Settlement(EFFECT_KEY, {"output": 1}), Settlement("effect-2", {"output": 2})],
            expected_attempt=1, at=at(60), lease_expires_at=at(120))
        for key, output in ((EFFECT_KEY, 1), ("effect-2", 2)):
            effect = _effect(store, key)
            assert effect.status is EffectStatus.COMPLETED
            assert effect.result == {"output": output}
        latest = store.load_latest_checkpoint(RUN)
        assert latest == make_checkpoint(RUN, 2, 1)
        run = store.load_run(RUN)
        assert run is not None and run.lease_expires_at == at(120)
        # The next checkpoint goes on from it, on either path.
        store.save_checkpoint(make_checkpoint(RUN, 3, 1), expected_attempt=1)
        assert [info.seq for info in store.list_checkpoints(RUN)] == [1, 2, 3]

    def test_an_identical_settlement_of_a_completed_effect_is_a_no_op(
            self, store: RunStore) -> None:
        start_busy_run(store)
        store.complete_effect(EFFECT_KEY, run_id=RUN, expected_attempt=1, result="done",
                              at=at(55))
        _settling(store).save_checkpoint_settling(
            make_checkpoint(RUN, 2, 1), [Settlement(EFFECT_KEY, "done")],
            expected_attempt=1, at=at(60))
        assert _effect(store, EFFECT_KEY).result == "done"
        latest = store.load_latest_checkpoint(RUN)
        assert latest is not None and latest.seq == 2

    def test_a_refused_checkpoint_settles_nothing(self, store: RunStore) -> None:
        start_busy_run(store)
        _refused(store, CheckpointConflict, make_checkpoint(RUN, 4, 1),
                 settlements=[Settlement(EFFECT_KEY, "written")])
        assert _effect(store, EFFECT_KEY).status is EffectStatus.RESERVED

    def test_a_refused_settlement_saves_no_checkpoint(self, store: RunStore) -> None:
        start_busy_run(store)
        store.complete_effect(EFFECT_KEY, run_id=RUN, expected_attempt=1, result="first",
                              at=at(55))
        _refused(store, InvalidTransition, make_checkpoint(RUN, 2, 1),
                 settlements=[Settlement(EFFECT_KEY, "second")])

    def test_a_superseded_attempt_changes_nothing(self, store: RunStore) -> None:
        start_busy_run(store)
        store.resume_run(RUN, owner="owner-2", now=at(1000), lease_seconds=60,
                         allow_running_takeover=True)
        _refused(store, StaleAttempt, make_checkpoint(RUN, 2, 1),
                 settlements=[Settlement(EFFECT_KEY, "late")], seconds=1001)

    def test_reserves_new_keys_with_the_checkpoint(self, store: RunStore) -> None:
        start_busy_run(store)
        _settling(store).save_checkpoint_settling(
            make_checkpoint(RUN, 2, 1), [Settlement(EFFECT_KEY, "done")], reservations=[NEW_KEY],
            expected_attempt=1, at=at(60))
        reserved = _effect(store, NEW_KEY)
        assert (reserved.status, reserved.attempt, reserved.created_at) == (
            EffectStatus.RESERVED, 1, at(60))
        assert reserved.result is None and reserved.completed_at is None
        # Reserved like `begin_effect`: a later begin returns it unchanged.
        assert store.begin_effect(NEW_KEY, run_id=RUN, expected_attempt=1, at=at(61)) == reserved
        # And it settles with the next checkpoint.
        _settling(store).save_checkpoint_settling(
            make_checkpoint(RUN, 3, 1), [Settlement(NEW_KEY, {"output": 3})],
            expected_attempt=1, at=at(70))
        settled = _effect(store, NEW_KEY)
        assert (settled.status, settled.result, settled.completed_at) == (
            EffectStatus.COMPLETED, {"output": 3}, at(70))
        assert [info.seq for info in store.list_checkpoints(RUN)] == [1, 2, 3]

    def test_a_reservation_of_a_key_the_run_has_is_refused_with_nothing_saved(
            self, store: RunStore) -> None:
        start_busy_run(store)
        _refused(store, InvalidTransition, make_checkpoint(RUN, 2, 1), reservations=[EFFECT_KEY])

    def test_a_refused_checkpoint_reserves_nothing(self, store: RunStore) -> None:
        start_busy_run(store)
        _refused(store, CheckpointConflict, make_checkpoint(RUN, 4, 1), reservations=[NEW_KEY])

    def test_a_superseded_or_finished_attempt_reserves_nothing(self, store: RunStore) -> None:
        start_busy_run(store)
        store.resume_run(RUN, owner="owner-2", now=at(1000), lease_seconds=60,
                         allow_running_takeover=True)
        _refused(store, StaleAttempt, make_checkpoint(RUN, 2, 1),
                 reservations=[NEW_KEY], seconds=1001)
        store.cancel_run(RUN, at=at(1002))
        _refused(store, RunTerminal, make_checkpoint(RUN, 2, 2),
                 reservations=[NEW_KEY], expected_attempt=2, seconds=1003)
