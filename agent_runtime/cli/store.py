"""Which store a command uses (docs/design.md section 9), decided once, before anything opens.

In order: `--store-driver`/`--store`; else `AGENT_RUNTIME_STORE=DRIVER:LOCATION`;
else the `store:` of the runtime config the command reads (`--config FILE`, else
the file `cli.config_file` finds: beside the manifest of `run` and
`run-manifest`, else `agent-runtime.config.yaml`, `.yml` or `.json` in the
current directory); else the SQLite default. A driver given without a location gets that
driver's default location (`./.agent-runtime/runs` for the file store), and
the DynamoDB driver, which has none, asks for one.
"""

from __future__ import annotations

import argparse
import os

from agent_runtime.cli.config_file import CURRENT_DIRECTORY, choose_config
from agent_runtime.cli.flags import DEFAULT_FILE_STORE, DEFAULT_STORE, STORE_VARIABLE
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


# Commands whose runtime config may be found beside the manifest they are given.
_MANIFEST_COMMANDS = frozenset({"run", "run-manifest"})


def _configured_store(args: argparse.Namespace) -> tuple[str, str, bool] | None:
    """The `store:` of the runtime config the command reads: (store, where it is
    written, whether the next command finds it again by looking in the current
    directory)."""
    manifest = getattr(args, "file", None) if args.command in _MANIFEST_COMMANDS else None
    choice = choose_config(getattr(args, "config", None), manifest)
    if choice is None or not choice.path.is_file():
        return None  # a named file that is missing is reported when the config is read
    from agent_runtime.config import load_config  # noqa: PLC0415 - only when the file exists

    store = load_config(choice.path).store
    if store is None:
        return None
    here = choice.found == CURRENT_DIRECTORY
    return store, f"{choice.path.name if here else choice.path}: store", here


def select_store(args: argparse.Namespace) -> None:
    """Fill `args.store_driver`, `args.store` and `args.store_source` (who chose it)."""
    driver, location = args.store_driver, args.store
    if driver is not None or location is not None:
        args.store_source = "--store" if location is not None else "--store-driver"
        driver = driver or "sqlite"
    elif os.environ.get(STORE_VARIABLE):
        args.store_source = STORE_VARIABLE
        driver, location = parse_store_text(os.environ[STORE_VARIABLE], source=STORE_VARIABLE)
    elif (configured := _configured_store(args)) is not None:
        args.store_source = configured[1]
        args.store_found_again = configured[2]
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
            or getattr(args, "store_found_again", False):
        return ""  # the next command finds the same store the same way
    text = f" --store-driver {args.store_driver}"
    if args.store:
        text += f" --store {_shell_word(args.store)}"
    return text


def _shell_word(text: str) -> str:
    import shlex  # noqa: PLC0415

    return shlex.quote(text)
