"""How many runs `agent-runtime serve` executes at once: places, bounded for the host and
for each tenant (`serve --max-concurrent-runs`, `--tenant-concurrent-runs`).

A run holds a place from the moment it is handed to the launcher until its
attempt ends, whatever it waits on meanwhile (a model, a tool, a retry of a
commit the store refused). A run waiting on a model costs a coroutine, not a
thread, so the bound is in the thousands; it is there so that a burst of
requests cannot grow the process without limit.

A request that starts or resumes a run asks for its place first (`admit`),
before it stores anything: with none free it is answered 429 with
`Retry-After` and nothing is created or recorded. The place is the run's once
the request hands it to the launcher (`claim`, inside the `admit` block: the
block's place travels in a context variable, so `Launcher.start` keeps its
signature); a request that fails before gives it back as its block ends.
Runs the reconciler hands over take a free place or wait for its next pass
(`take`). No run is ever queued: a run is executing, or it is in the store.

Tenants share the host fairly by a bound each: one tenant holds at most
`tenant_runs` places, so its burst leaves the others room.

The bounds are the server's. Under `serve --processes N` each child counts its
places in the supervisor's `PlaceLedger` as well, and decides on the sum over
all children: a request is refused only when the server as a whole is at a
bound, whichever child the kernel handed its connection to.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from types import TracebackType

from agent_runtime.api.place_ledger import PlaceLedger
from agent_runtime.api.services import AtCapacity

DEFAULT_MAX_RUNS = 2000
# How soon a client refused for capacity should ask again: runs waiting on
# models end or suspend within seconds.
RETRY_AFTER_SECONDS = 1
# While the server stops, the next one may take a little while to start.
STOPPING_RETRY_AFTER_SECONDS = 5

MAX_RUNS_FLAG = "--max-concurrent-runs"
TENANT_RUNS_FLAG = "--tenant-concurrent-runs"

_ADMITTED: ContextVar[Place | None] = ContextVar("agent_runtime_admitted_place", default=None)


class RunPlaces:
    """The places of the runs executing on this host: thread-safe counters, nothing listed;
    with a `ledger`, this process's part of the counts of all the server's processes."""

    def __init__(self, *, max_runs: int = DEFAULT_MAX_RUNS,
                 tenant_runs: int | None = None, ledger: PlaceLedger | None = None) -> None:
        if max_runs < 1:
            raise ValueError("max_runs must be 1 or more")
        if tenant_runs is not None and not 1 <= tenant_runs <= max_runs:
            raise ValueError("tenant_runs must be 1 to max_runs")
        self.max_runs = max_runs
        self.tenant_runs = max_runs if tenant_runs is None else tenant_runs
        self._lock = threading.Lock()
        self._ledger = ledger
        self._held: dict[str | None, int] = {}
        self._total = 0
        # Set once, from a signal handler too: a plain flag, no lock.
        self._stopping = False

    # -- what requests use ---------------------------------------------------

    def admit(self, tenant: str | None) -> Place:
        """A place for one run of `tenant`, held until the `with` block ends unless a
        start or resume inside it claims it; `AtCapacity` when none is free."""
        with self._counting():
            refusal = self._refusal(tenant)
            if refusal is not None:
                raise refusal
            self._hold(tenant)
        return Place(self, tenant)

    def claim(self, tenant: str | None) -> bool:
        """Make the place the current `admit` block holds for `tenant` the run's: True,
        or False when the caller holds none (the run needs a free place: `take`)."""
        place = _ADMITTED.get()
        if place is None or place.places is not self or place.used or place.tenant != tenant:
            return False
        place.used = True
        return True

    # -- what the launcher uses ------------------------------------------------

    def take(self, tenant: str | None) -> bool:
        """Hold a free place for a run of `tenant`, if there is one."""
        with self._counting():
            if self._refusal(tenant) is not None:
                return False
            self._hold(tenant)
            return True

    def release(self, tenant: str | None) -> None:
        with self._counting():
            left = self._held[tenant] - 1
            if left:
                self._held[tenant] = left
            else:
                del self._held[tenant]
            self._total -= 1
            if self._ledger is not None:
                self._ledger.add(tenant, -1)

    def free(self) -> int:
        """Places free now, for any tenant (the reconciler's room); 0 while stopping."""
        with self._counting():
            return 0 if self._stopping else self.max_runs - self._server_total()

    def held(self) -> int:
        """Places held on this server (by all its processes, with a ledger)."""
        with self._counting():
            return self._server_total()

    def stop(self) -> None:
        """Refuse every place from now on (the server is stopping). Signal-safe."""
        self._stopping = True

    @contextmanager
    def _counting(self) -> Iterator[None]:
        """The counts held still: this process's threads', and the ledger's processes'."""
        with self._lock:
            if self._ledger is None:
                yield
            else:
                with self._ledger.locked():
                    yield

    def _server_total(self) -> int:
        return self._total if self._ledger is None else self._ledger.total()

    def _tenant_held(self, tenant: str | None) -> int:
        return self._held.get(tenant, 0) if self._ledger is None else self._ledger.of(tenant)

    def _hold(self, tenant: str | None) -> None:
        self._held[tenant] = self._held.get(tenant, 0) + 1
        self._total += 1
        if self._ledger is not None:
            self._ledger.add(tenant, 1)

    def _refusal(self, tenant: str | None) -> AtCapacity | None:
        """Why no place can be held for `tenant` now (the caller holds the counts)."""
        if self._stopping:
            return AtCapacity("this server is stopping and starts no more runs; the next "
                              "one continues them", retry_after=STOPPING_RETRY_AFTER_SECONDS,
                              status=503)
        if self._server_total() >= self.max_runs:
            return AtCapacity(f"this server executes {self.max_runs} runs at once, as many "
                              f"as it may ({MAX_RUNS_FLAG}); retry when some finish or "
                              "suspend", retry_after=RETRY_AFTER_SECONDS)
        if self._tenant_held(tenant) >= self.tenant_runs:
            return AtCapacity(f"this tenant has {self.tenant_runs} runs executing on this "
                              f"server, as many as one tenant may at once ({TENANT_RUNS_FLAG}); "
                              "retry when some finish or suspend",
                              retry_after=RETRY_AFTER_SECONDS)
        return None


class Place:
    """A place `RunPlaces.admit` holds for a request: a context manager (see the module doc)."""

    def __init__(self, places: RunPlaces, tenant: str | None) -> None:
        self.places = places
        self.tenant = tenant
        self.used = False
        self._token: Token[Place | None] | None = None

    def __enter__(self) -> Place:
        self._token = _ADMITTED.set(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._token is not None:
            _ADMITTED.reset(self._token)
            self._token = None
        if not self.used:
            self.used = True  # given back once
            self.places.release(self.tenant)


__all__ = ["DEFAULT_MAX_RUNS", "MAX_RUNS_FLAG", "TENANT_RUNS_FLAG", "Place", "RunPlaces"]
