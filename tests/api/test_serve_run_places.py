"""The places of `serve`'s runs (`RunPlaces`): a bound for the host and one per tenant, so
that one tenant's burst leaves the others room (issue 31), and a request refused at
either bound before it stores anything (issue 34)."""

from __future__ import annotations

import pytest

from agent_runtime.api.run_capacity import RunPlaces
from agent_runtime.api.services import AtCapacity


def refusal(places: RunPlaces, tenant: str) -> AtCapacity:
    with pytest.raises(AtCapacity) as refused:
        places.admit(tenant)
    return refused.value


def test_one_tenant_cannot_hold_every_place() -> None:
    places = RunPlaces(max_runs=3, tenant_runs=2)
    with places.admit("alice"), places.admit("alice"):
        over = refusal(places, "alice")
        assert (over.status, over.retry_after) == (429, 1)
        assert "--tenant-concurrent-runs" in over.detail
        # The place alice may not take is bob's to take.
        with places.admit("bob"):
            assert "--max-concurrent-runs" in refusal(places, "carol").detail
    assert places.held() == 0


def test_a_place_claimed_by_a_start_is_the_runs_until_released() -> None:
    places = RunPlaces(max_runs=1)
    with places.admit("alice"):
        assert places.claim("bob") is False  # another tenant's run takes no one's place
        assert places.claim("alice") is True
        assert places.claim("alice") is False  # one place, one run
    assert places.held() == 1 and places.free() == 0
    assert places.take("bob") is False
    places.release("alice")
    assert places.take("bob") is True
    assert places.held() == 1


def test_without_a_request_a_run_takes_a_free_place_or_none() -> None:
    places = RunPlaces(max_runs=2, tenant_runs=1)
    assert places.claim("alice") is False  # no request holds one
    assert places.take("alice") is True
    assert places.take("alice") is False
    assert places.take("bob") is True
    assert places.free() == 0


def test_a_stopping_server_admits_no_one() -> None:
    places = RunPlaces(max_runs=5)
    places.stop()
    stopping = refusal(places, "alice")
    assert stopping.status == 503 and stopping.retry_after >= 1
    assert places.take("alice") is False
    assert places.free() == 0


@pytest.mark.parametrize(("max_runs", "tenant_runs"), [(0, None), (2, 0), (2, 3)])
def test_the_bounds_are_checked(max_runs: int, tenant_runs: int | None) -> None:
    with pytest.raises(ValueError, match=r"max_runs|tenant_runs"):
        RunPlaces(max_runs=max_runs, tenant_runs=tenant_runs)


def test_the_flags_default_is_the_places_default() -> None:
    from agent_runtime.api.run_capacity import DEFAULT_MAX_RUNS
    from agent_runtime.cli.serve import DEFAULT_MAX_CONCURRENT_RUNS

    assert DEFAULT_MAX_CONCURRENT_RUNS == DEFAULT_MAX_RUNS
