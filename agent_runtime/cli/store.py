"""Which store a command uses (docs/design.md section 9), decided once, before anything opens.

In order: `--store-driver`/`--store`; else `AGENT_RUNTIME_STORE=DRIVER:LOCATION`;
else the `store:` of `agent-runtime.config.yaml` in the current directory;
else the SQLite default. A driver given without a location gets that
driver's default location (`./.agent-runtime/runs` for the file store), and
the DynamoDB driver, which has none, asks for one.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from agent_runtime.cli.flags import (
    CONFIG_FILE,
    DEFAULT_FILE_STORE,
    DEFAULT_STORE,
    STORE_VARIABLE,
)
from agent_runtime.errors import InvalidInput
from agent_runtime.excerpts import excerpt

_DEFAULT_LOCATIONS = {"sqlite": DEFAULT_STORE, "file": DEFAULT_FILE_STORE}


def parse_store_text(text: str, *, source: str) -> tuple[str, str | None]:
    """`DRIVER:LOCATION` (or a bare `memory`) as (driver, location)."""
    from stores.drivers import driver_names  # noqa: PLC0415 - a metadata scan, when used

    driver, separator, location = text.partition(":")
    names = driver_names()
    if driver not in names:
        raise InvalidInput(f"expected DRIVER:LOCATION with DRIVER one of "
                           f"{', '.join(names)}, got {excerpt(text)}", source=source)
    if driver != "memory" and (not separator or not location):
        raise InvalidInput(f"the {driver} driver needs a location: {driver}:LOCATION",
                           source=source)
    return driver, location or None


def _configured_store() -> tuple[str, str] | None:
    """The `store:` of the runtime config found in the current directory, with its name."""
    path = Path(CONFIG_FILE)
    if not path.is_file():
        return None
    from agent_runtime.config import load_config  # noqa: PLC0415 - only when the file exists

    store = load_config(path).store
    return None if store is None else (store, f"{CONFIG_FILE}: store")


def select_store(args: argparse.Namespace) -> None:
    """Fill `args.store_driver`, `args.store` and `args.store_source` (who chose it)."""
    driver, location = args.store_driver, args.store
    if driver is not None or location is not None:
        args.store_source = "--store" if location is not None else "--store-driver"
        driver = driver or "sqlite"
    elif os.environ.get(STORE_VARIABLE):
        args.store_source = STORE_VARIABLE
        driver, location = parse_store_text(os.environ[STORE_VARIABLE], source=STORE_VARIABLE)
    elif (configured := _configured_store()) is not None:
        args.store_source = configured[1]
        driver, location = parse_store_text(configured[0], source=configured[1])
    else:
        args.store_source = "default"
        driver = "sqlite"
    if location is None and driver != "memory":
        location = _DEFAULT_LOCATIONS.get(driver)
        if location is None:
            raise InvalidInput(f"the {driver} driver needs --store LOCATION (a table name: "
                               "TABLE?bucket=B&region=R)", source="--store")
    args.store_driver, args.store = driver, location


def store_flags_text(args: argparse.Namespace) -> str:
    """The flags that name this command's store, for next-step hints ('' for the default)."""
    if getattr(args, "store_source", "default") in ("default", STORE_VARIABLE) \
            or args.store_source.startswith(CONFIG_FILE):
        return ""  # the next command finds the same store the same way
    text = f" --store-driver {args.store_driver}"
    if args.store:
        text += f" --store {_shell_word(args.store)}"
    return text


def _shell_word(text: str) -> str:
    import shlex  # noqa: PLC0415

    return shlex.quote(text)
