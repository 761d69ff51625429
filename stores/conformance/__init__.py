"""The RunStore contract suite: every rule of `stores.base` as pytest tests.

A store is done when this suite passes on it unchanged. To run it on another
store, subclass `RunStoreConformance` in a test module and provide a fixture
named `store` that yields a fresh, empty, open store and closes it afterwards:

    # tests/test_my_store.py
    import pytest
    from stores.conformance import RunStoreConformance
    class TestMyStore(RunStoreConformance):
        @pytest.fixture
        def store(self, tmp_path):
            with MyStore(tmp_path / "db") as store:
                yield store

Each test is named after the rule it checks and asserts only what the
`RunStore` methods show: the error raised and the state read back afterwards,
never a backend's internals. Time is a fixed, timezone-aware UTC `NOW`, moved
with `at(seconds)`. `make_run` and `make_checkpoint` build records for a store
author's own tests too.

`list_effects(run_id)` is not part of the `RunStore` protocol: the one test
that needs it skips, with the reason, on a store without it, and the "changes
nothing" checks then cover the run and its checkpoints only.

The rules live in one mixin per concept: `lifecycle` (ids, leases, fencing,
terminal states), `checkpoints` (sequence, round trips, storage), `listing`
(`list_runs` order, filters, pages), `answers` (`resolve_approval` for
approvals and unknown effects, the resume outbox of `request_resume`),
`sub_runs` (a sub-run's end files a resume request on its parent), `run_keys`
(idempotent requests' keys, unique among runs), `run_search` (an operator's
search: agent, id prefix, creation time), `queries` (effects, deletion,
the store object), `events` (the run's event log); `builders` holds the clock,
the record builders and the scenarios they share.
"""

from __future__ import annotations

from stores.conformance.answers import AnswerConformance
from stores.conformance.builders import (
    EFFECT_KEY,
    ERROR,
    LEASE_SECONDS,
    MANIFEST_HASH,
    NAMING_A_RUN,
    NOW,
    OUTPUT,
    RUN,
    UNKNOWN_EFFECT,
    WRITES,
    WRITES_OF_A_RUNNING_RUN,
    Write,
    assert_utc,
    at,
    finish,
    list_effects,
    make_checkpoint,
    make_run,
    observe,
    run_in,
    start_busy_run,
    start_run,
    suspend_for_approval,
    suspend_for_effect,
)
from stores.conformance.checkpoints import CheckpointConformance
from stores.conformance.events import EventLogConformance
from stores.conformance.lifecycle import LifecycleConformance
from stores.conformance.listing import ListingConformance
from stores.conformance.queries import QueryConformance
from stores.conformance.run_keys import RunKeyConformance
from stores.conformance.run_search import RunSearchConformance
from stores.conformance.sub_runs import SubRunConformance

__all__ = [
    "EFFECT_KEY",
    "ERROR",
    "LEASE_SECONDS",
    "MANIFEST_HASH",
    "NAMING_A_RUN",
    "NOW",
    "OUTPUT",
    "RUN",
    "UNKNOWN_EFFECT",
    "WRITES",
    "WRITES_OF_A_RUNNING_RUN",
    "AnswerConformance",
    "CheckpointConformance",
    "EventLogConformance",
    "LifecycleConformance",
    "ListingConformance",
    "QueryConformance",
    "RunKeyConformance",
    "RunSearchConformance",
    "RunStoreConformance",
    "SubRunConformance",
    "Write",
    "assert_utc",
    "at",
    "finish",
    "list_effects",
    "make_checkpoint",
    "make_run",
    "observe",
    "run_in",
    "start_busy_run",
    "start_run",
    "suspend_for_approval",
    "suspend_for_effect",
]


# pytest collects a class's tests base by base in reverse MRO order, so the bases
# are listed last concept first: the suite then runs, and reports, lifecycle,
# checkpoints, listing, answers, sub-runs, the rest, in the order the rules build on
# each other.
class RunStoreConformance(EventLogConformance, QueryConformance, RunKeyConformance,
                          RunSearchConformance, SubRunConformance,
                          AnswerConformance, ListingConformance, CheckpointConformance,
                          LifecycleConformance):
    """The RunStore contract. Subclass it and provide a `store` fixture (see the package)."""
