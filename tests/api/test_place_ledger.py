"""The place ledger of `serve --processes`: the run bounds hold for all the processes
together. Each process's places are summed with the others'; a tenant no token
names counts in one shared column; a dead process's row is zeroed; its lock
excludes another process that inherited the very same open file."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from agent_runtime.api.place_ledger import PlaceLedger
from agent_runtime.api.run_capacity import RunPlaces
from agent_runtime.api.services import AtCapacity


@pytest.fixture
def ledger() -> Iterator[PlaceLedger]:
    made = PlaceLedger.create(2, ["acme", "globex"])
    yield made
    made.close()


def _row(ledger: PlaceLedger, slot: int) -> PlaceLedger:
    """The ledger as the child in `slot` maps it (a descriptor of its own to close)."""
    return PlaceLedger(os.dup(ledger.fileno()), slot=slot)


def test_each_process_counts_in_its_row_and_reads_the_sum(ledger: PlaceLedger) -> None:
    first, second = _row(ledger, 0), _row(ledger, 1)
    with first.locked():
        first.add("acme", 2)
        second.add("acme", 1)
        second.add("globex", 1)
    with ledger.locked():
        assert (ledger.total(), ledger.of("acme"), ledger.of("globex")) == (4, 3, 1)
    with first.locked():
        first.add("acme", -2)
        assert (first.total(), first.of("acme")) == (2, 1)
    first.close()
    second.close()


def test_tenants_no_token_names_and_runs_without_one_share_a_column(
        ledger: PlaceLedger) -> None:
    row = _row(ledger, 1)
    with row.locked():
        row.add("initech", 1)
        row.add(None, 1)
        assert (row.of("initech"), row.of("umbrella"), row.of(None)) == (2, 2, 2)
        assert (row.total(), row.of("acme")) == (2, 0)
    row.close()


def test_a_gone_processes_row_is_zeroed_and_the_others_kept(ledger: PlaceLedger) -> None:
    first, second = _row(ledger, 0), _row(ledger, 1)
    with first.locked():
        first.add("acme", 5)
        second.add("globex", 1)
    ledger.clear(0)
    with ledger.locked():
        assert (ledger.total(), ledger.of("acme"), ledger.of("globex")) == (1, 0, 1)
    first.close()
    second.close()


def test_a_slot_outside_the_ledger_and_a_place_for_the_supervisor_are_refused(
        ledger: PlaceLedger) -> None:
    with pytest.raises(ValueError, match="slot 2 of a ledger of 2 processes"):
        PlaceLedger(os.dup(ledger.fileno()), slot=2)
    with pytest.raises(RuntimeError, match="holds no places"):
        ledger.add("acme", 1)


def test_the_lock_excludes_a_process_that_inherited_the_same_open_file(
        ledger: PlaceLedger) -> None:
    # Children inherit one open file description: a lock of the description
    # (flock) would be theirs in common; the ledger's is each process's own.
    probe = ("import fcntl, sys\n"
             "try:\n    fcntl.lockf(int(sys.argv[1]), fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "except OSError:\n    print('held')\nelse:\n    print('free')\n")
    fd = ledger.fileno()

    def probed() -> str:
        done = subprocess.run([sys.executable, "-c", probe, str(fd)], pass_fds=(fd,),
                              capture_output=True, text=True, timeout=60, check=True)
        return done.stdout.strip()

    with ledger.locked():
        assert probed() == "held"
    assert probed() == "free"


def test_run_places_bound_the_server_not_each_process(ledger: PlaceLedger) -> None:
    first = RunPlaces(max_runs=3, tenant_runs=2, ledger=_row(ledger, 0))
    second = RunPlaces(max_runs=3, tenant_runs=2, ledger=_row(ledger, 1))
    with first.admit("acme") as place:
        assert first.claim("acme")
    assert place.used
    assert second.take("acme")
    # acme holds its two places, one in each process: its third is refused in both.
    for places in (first, second):
        with pytest.raises(AtCapacity, match="this tenant has 2 runs"):
            places.admit("acme")
        assert not places.take("acme")
    assert second.take("globex")
    # The server's three places are held: no tenant gets a fourth, anywhere.
    for places in (first, second):
        with pytest.raises(AtCapacity, match="executes 3 runs at once"):
            places.admit("initech")
        assert (places.free(), places.held()) == (0, 3)
    first.release("acme")
    assert (second.free(), second.held()) == (1, 2)
    assert second.take("acme")


def test_an_admitted_place_not_claimed_is_given_back_to_the_server(
        ledger: PlaceLedger) -> None:
    first = RunPlaces(max_runs=1, ledger=_row(ledger, 0))
    second = RunPlaces(max_runs=1, ledger=_row(ledger, 1))
    with first.admit("acme"), pytest.raises(AtCapacity):
        second.admit("acme")
    # The request failed before its run was handed over: the place is free again.
    with second.admit("acme"):
        assert second.claim("acme")
    assert first.held() == 1
