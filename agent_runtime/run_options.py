"""Run options that say where a run came from rather than how to run it.

A new run (a sub-run's child, a fork) never inherits them from the run it
copies: `FORKED_FROM` (the run and seq a fork starts from) and
`REQUEST_SHA256` (the fingerprint of the HTTP request that created the run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The tenant of a single-user host: the runs the CLI starts and the one tenant of a
# `serve` with one token, so that each shows the other's runs on the same store.
LOCAL_TENANT = "local"
TENANT_ENV = "AGENT_RUNTIME_TENANT"

FORKED_FROM = "forked_from"
REQUEST_SHA256 = "request_sha256"
ORIGIN_OPTIONS = (FORKED_FROM, REQUEST_SHA256)


def without_origin(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """`options` without the ones that only say where their run came from."""
    return {key: value for key, value in (options or {}).items() if key not in ORIGIN_OPTIONS}
