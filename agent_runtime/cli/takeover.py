"""What `resume` says about a run still marked running: who holds its lease, and
how (and when) `--allow-running-takeover` takes it over.

A run whose process was killed stays `running` under its owner's lease. The
store refuses a second attempt while the lease holds (`LeaseHeld`); this
module asks first whether the owner is a process of this host and whether it
is gone (`ProcessLiveness`), so the refusal can say what to do: take over at
once when the owner is confirmed gone, else once the lease expires.
"""

from __future__ import annotations

import shlex
from datetime import datetime

from stores.records import RunRecord

from agent_runtime.errors import Conflict
from agent_runtime.excerpts import excerpt
from agent_runtime.owner_liveness import Liveness, OwnerStatus, ProcessLiveness

FLAG = "--allow-running-takeover"


def owner_status(record: RunRecord) -> OwnerStatus:
    """Whether the owner of a running run's lease is a process of this host, and gone."""
    return ProcessLiveness()(record)


def takeover_refusal(record: RunRecord, owner: OwnerStatus, *, takeover: bool, now: datetime,
                     store_flags: str = "") -> Conflict | None:
    """Why `resume` (with `takeover` when the flag was given) cannot continue a running
    run now, saying what would; None when the store may be asked to reserve it."""
    run_id = record.run_id
    holder = excerpt(record.lease_owner or "an unknown owner")
    expires = record.lease_expires_at
    lease = f"a lease held by {holder}" + (f" until {expires.isoformat()}" if expires else "")
    command = f"agent-runtime resume {shlex.quote(run_id)}{store_flags} {FLAG}"
    gone = owner.liveness is Liveness.GONE
    expired = expires is None or expires <= now
    if takeover and (gone or expired):
        return None
    shown = excerpt(run_id)
    if gone:  # and not asked to take over
        return Conflict(f"run {shown} is running under {lease}, but that owner was a process "
                        f"of this host that is gone ({owner.detail}): no need to wait for the "
                        f"lease, take the run over now with {FLAG}: {command}", source="RUN_ID")
    if expired:  # and not asked to take over
        return Conflict(f"run {shown} is still marked running under {lease}, which has "
                        f"expired: if that owner died, take the run over with {FLAG}: "
                        f"{command}", source="RUN_ID")
    if takeover:  # the lease holds and its owner is not known to be gone
        why = (f"its owner is a live process of this host ({owner.detail}), still executing "
               "it: stop that process (Ctrl-C suspends the run) and resume it then"
               if owner.liveness is Liveness.ALIVE else
               f"that cannot be told here ({owner.detail}): retry once the lease expires, or "
               "let `agent-runtime reconcile` do it")
        return Conflict(f"run {shown} is running under {lease}; {FLAG}: takeover is allowed "
                        "only after it expires, or at once when its owner was a process of this "
                        f"host that is gone, and {why}", source="RUN_ID")
    if owner.liveness is Liveness.ALIVE:
        return Conflict(f"run {shown} is running under {lease}: its owner is a live process "
                        f"of this host ({owner.detail}), still executing it; stop that process "
                        "(Ctrl-C suspends the run) and resume it then (were that pid reused "
                        f"by another program, {FLAG} takes the run over once the lease "
                        "expires)", source="RUN_ID")
    return Conflict(f"run {shown} is running under {lease}; if that owner died, take the run "
                    f"over with {FLAG} once the lease expires (at once only when the owner was "
                    f"a process of this host that is gone, which cannot be told here: "
                    f"{owner.detail}): {command}, or let `agent-runtime reconcile` do it",
                    source="RUN_ID")
