"""The values of the CLI's flags, checked as argparse reads them, and their defaults.

Light on purpose: `agent-runtime --help` builds the parser from this module
and nothing heavier (no engine, no pydantic), so it starts as fast as Python.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from datetime import UTC, datetime

from agent_runtime.excerpts import excerpt

DEFAULT_STORE = "./.agent-runtime/runs.sqlite"
DEFAULT_FILE_STORE = "./.agent-runtime/runs"
DEFAULT_EVENTS = "./.agent-runtime/events.jsonl"
DEFAULT_ARTIFACTS = "./.agent-runtime/artifacts"
DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_GRACE_SECONDS = 10.0
DEFAULT_PAGE = 50
# The reconciler's own defaults (agent_runtime.reconcile), repeated here so the
# parser need not import it; tests/e2e/test_cli_help.py keeps them equal.
DEFAULT_MAX_TAKEOVERS = 3
DEFAULT_RESUME_GRACE_SECONDS = 30.0

RUN_STATUSES = ("created", "running", "suspended", "completed", "failed", "cancelled")
# Where a store is chosen when no flag says (docs/design.md section 9).
STORE_VARIABLE = "AGENT_RUNTIME_STORE"

MAX_SECONDS = 7 * 24 * 3600.0  # a lease or an interval past a week is a typo
MAX_COUNT = 2**53 - 1  # the largest integer every store and JSON reader keeps exactly


def store_driver(text: str) -> str:
    """`--store-driver`: a built-in driver or one an installed distribution declares
    (stores.drivers; read only when the flag is given, so `--help` costs no scan)."""
    from stores.drivers import driver_names  # noqa: PLC0415 - a metadata scan, when used

    names = driver_names()
    if text not in names:
        raise argparse.ArgumentTypeError(f"invalid choice: {excerpt(text)} (choose from "
                                          f"{', '.join(names)})")
    return text


MAX_TENANT_LENGTH = 128


def tenant_name(text: str) -> str:
    """`--tenant` (and $AGENT_RUNTIME_TENANT): visible ASCII, no spaces, at most 128
    characters, so it reads the same in a listing, a log line and a URL."""
    if not text or len(text) > MAX_TENANT_LENGTH or not all("!" <= c <= "~" for c in text):
        raise argparse.ArgumentTypeError(
            f"{excerpt(text)!s} is not a tenant name: 1 to {MAX_TENANT_LENGTH} visible ASCII "
            "characters, no spaces")
    return text


def seconds(text: str) -> float:
    """A positive, finite number of seconds, at most a week: `--lease-seconds`, `--interval`."""
    return _seconds(text, minimum_exclusive=True)


def grace_seconds(text: str) -> float:
    """Zero or more seconds, at most a week: `--grace-seconds`."""
    return _seconds(text, minimum_exclusive=False)


def _seconds(text: str, *, minimum_exclusive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {excerpt(text)}"
                                         ) from None
    low = value <= 0 if minimum_exclusive else value < 0
    if not math.isfinite(value) or low or value > MAX_SECONDS:
        bound = "above 0" if minimum_exclusive else "0 or more"
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds {bound} and at most {MAX_SECONDS:.0f}, "
            f"got {excerpt(text)}")
    return value


def count(minimum: int) -> Callable[[str], int]:
    """An integer from `minimum` up to 2**53-1: `--limit`, `--seq`, `--max-total-tokens`."""
    def parse(text: str) -> int:
        stripped = text.strip()
        digits = stripped.lstrip("+-")
        if not digits.isascii() or not digits.isdigit() or len(stripped) - len(digits) > 1:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {excerpt(text)}")
        # More digits than any allowed value has: refused before int() reads them all.
        value = int(stripped) if len(digits) <= 20 else (-1 if stripped[0] == "-" else 1) * (
            MAX_COUNT + 1)
        if not minimum <= value <= MAX_COUNT:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {excerpt(text)}"
                                             if value < minimum else
                                             f"must be at most {MAX_COUNT}, got {excerpt(text)}")
        return value
    parse.__name__ = "count"
    return parse


def zoned_time(text: str) -> datetime:
    """`--since`, `--until`: an ISO 8601 date and time with its zone, as UTC. The zone
    is required, so a search means one instant wherever it runs."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 date and time with its zone (2026-01-31T14:00:00Z), "
            f"got {excerpt(text)}")
    return moment.astimezone(UTC)
