"""How the CLI turns flags and a run's remembered options into a store and a runtime.

A run remembers its runtime options (`--model`, `--config`, `--tools`, and the
manifest's path); `resume`, `approve --resume`, `effects resolve`, `fork` and
`reconcile` rebuild the same runtime from them unless given again.

Every flag is checked before anything is opened or created: a refused
command leaves no store, event log or artifacts directory behind. Paths are
checked for what they must be (a file, a directory, or nothing yet) without
following them into a mkdir or a database connect.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agent_runtime.cli.config_file import find_config
from agent_runtime.cli.flags import DEFAULT_FILE_STORE, DEFAULT_STORE
from agent_runtime.errors import ConfigError, InvalidInput, ManifestError, NotFound
from agent_runtime.excerpts import excerpt
from agent_runtime.limits import current_limits, set_limits
from agent_runtime.manifest_input import check_structure, parse_document, text_problem
from agent_runtime.run_manifest import LoadedManifest, load_manifest_file

if TYPE_CHECKING:
    from stores.base import RunStore

    from agent_runtime.config import RuntimeConfig

_MAX_RUN_ID_BYTES = 200  # what every store can hold, the file store's file names included

PathKind = Literal["missing", "file", "directory", "other"]


def check_text_flags(args: argparse.Namespace) -> None:
    """Refuse a flag or argument that is not text: undecodable bytes arrive as lone
    surrogates, which no store, log or terminal can take."""
    for name, value in vars(args).items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and text_problem(item, sys.maxsize):
                flag = _ARGUMENTS.get(name, "--" + name.replace("_", "-"))
                raise InvalidInput(f"{excerpt(item)} is not valid UTF-8 text", source=flag)


_ARGUMENTS = {"file": "FILE", "run_id": "RUN_ID", "words": "effects", "command": "COMMAND"}


def check_run_id(run_id: str, *, source: str) -> str:
    """A run id every store can hold: visible text, no path separator, no leading dot."""
    problem = None
    if not run_id or run_id != run_id.strip():
        problem = "must not be empty or start or end with spaces"
    elif len(run_id.encode("utf-8", "surrogatepass")) > _MAX_RUN_ID_BYTES:
        problem = f"is longer than {_MAX_RUN_ID_BYTES} bytes"
    elif not run_id.isprintable() or text_problem(run_id, _MAX_RUN_ID_BYTES):
        problem = "contains control or invisible characters"
    elif run_id.startswith(".") or ".." in run_id or any(c in run_id for c in "/\\"):
        problem = "must not start with a dot or contain '..', '/' or '\\'"
    if problem:
        raise InvalidInput(f"run id {excerpt(run_id)} {problem}", source=source)
    return run_id


def parse_json_option(text: str, *, source: str) -> Any:
    """A JSON flag value (`approve --response`, `effects --result`), held to the
    variables limits: size, depth, string and integer size, duplicate keys."""
    value = parse_document(text, source=source, json_format=True,
                           limit=current_limits().variables_bytes, error=InvalidInput)
    try:
        check_structure(value, source=source)
    except InvalidInput as error:
        raise InvalidInput(error.reason, source=source, field=error.field) from None
    return value


# -- paths --------------------------------------------------------------------


def path_kind(path: str | Path, *, flag: str) -> PathKind:
    """What is at `path`, following links; a path that cannot name anything is refused."""
    shown = excerpt(str(path))
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.lexists(path):
            raise InvalidInput(f"{shown} is a symbolic link to nothing", source=flag) from None
        return "missing"
    except OSError as error:
        reason = {errno.ENOTDIR: "a part of the path is a file, not a directory",
                  errno.ENAMETOOLONG: "the path is too long"}.get(
            error.errno or 0, f"cannot use this path ({error.strerror or error})")
        raise InvalidInput(f"{shown}: {reason}", source=flag) from None
    except ValueError:  # an embedded NUL
        raise InvalidInput(f"{shown}: the path contains a NUL character", source=flag) from None
    if stat.S_ISREG(mode):
        return "file"
    return "directory" if stat.S_ISDIR(mode) else "other"


_KINDS = {"file": "a file", "directory": "a directory", "other": "not a regular file",
          "missing": "missing"}


def check_output_file(path: str, *, flag: str) -> None:
    """A file the command appends to (`--events`): a regular file, or nothing yet."""
    kind = path_kind(path, flag=flag)
    if kind not in ("file", "missing"):
        raise InvalidInput(f"{excerpt(path)} is {_KINDS[kind]}, expected a file", source=flag)


def check_output_directory(path: str, *, flag: str) -> None:
    """A directory the command writes into (`--artifacts`): a directory, or nothing yet."""
    kind = path_kind(path, flag=flag)
    if kind not in ("directory", "missing"):
        raise InvalidInput(f"{excerpt(path)} is {_KINDS[kind]}, expected a directory",
                           source=flag)


def check_input_file(path: str, *, flag: str) -> None:
    """A file the command reads (`--tools`, a scripted model's script)."""
    kind = path_kind(path, flag=flag)
    if kind == "missing":
        raise NotFound(f"{excerpt(path)} not found", source=flag)
    if kind != "file":
        raise InvalidInput(f"{excerpt(path)} is {_KINDS[kind]}, expected a file", source=flag)


def store_location(args: argparse.Namespace) -> str | None:
    """Where the command's store lives (`cli.store.select_store` filled it in; None: memory)."""
    if args.store is not None or args.store_driver == "memory":
        return str(args.store) if args.store is not None else None
    return DEFAULT_FILE_STORE if args.store_driver == "file" else DEFAULT_STORE


def check_store(args: argparse.Namespace, *, create: bool) -> None:
    """Refuse a store location that cannot be this driver's store, before it is opened.

    Without `create` (every command but `run`, `reconcile` and `serve`) a
    missing SQLite file or file-store directory is `NotFound`: those commands
    read runs that must already exist, and must not leave an empty store behind.
    """
    location = store_location(args)
    if args.store_driver not in ("sqlite", "file") or not location:
        return
    kind = path_kind(location, flag="--store")
    wanted: PathKind = "file" if args.store_driver == "sqlite" else "directory"
    if kind == "missing" and not create:
        raise NotFound(f"no {args.store_driver} store at {excerpt(location)} (nothing was "
                       "created)", source=getattr(args, "store_source", "--store"))
    if kind not in (wanted, "missing"):
        raise InvalidInput(f"{excerpt(location)} is {_KINDS[kind]}; a {args.store_driver} "
                           f"store is {_KINDS[wanted]}", source="--store")


def open_run_store(args: argparse.Namespace, *, create: bool = True) -> RunStore:
    from stores import open_store  # noqa: PLC0415 - not for commands that open no store

    check_store(args, create=create)
    try:
        return open_store(args.store_driver, store_location(args))
    except ValueError as error:
        raise ConfigError(str(error), source="--store") from error
    except ImportError as error:  # the dynamodb driver without botocore
        raise ConfigError(f"the {args.store_driver} driver needs {error.name or 'botocore'}, "
                          "which is not installed: pip install 'agent-runtime-durable[aws]'",
                          source="--store-driver") from None


def load_manifest(file: str) -> LoadedManifest:
    """The manifest file a command runs or checks; a run manifest's `runId` checked too."""
    try:
        loaded = load_manifest_file(file)
    except OSError as error:  # a run manifest's agent.ref no file system can name
        raise ManifestError(f"cannot read the agent manifest: {error.strerror or error}",
                            source=file, field="agent.ref") from None
    if loaded.run is not None and loaded.run.run_id is not None:
        check_run_id(loaded.run.run_id, source=f"{file}: runId")
    return loaded


# -- runtime options ------------------------------------------------------------


def model_option(value: str | None) -> str | None:
    if value is None:
        return None
    provider, _, model = value.partition("/")
    if not provider or not model:
        raise InvalidInput("expected PROVIDER/MODEL, e.g. scripted/echo or openai/gpt-5.6",
                           source="--model")
    if provider == "scripted" and model != "echo":
        check_input_file(model, flag="--model")
        return f"scripted/{Path(model).resolve()}"
    return value


def run_options(args: argparse.Namespace, previous: dict[str, Any] | None = None, *,
                discover_config: bool = False) -> dict[str, Any]:
    """Runtime options of a run: given flags win, else what the run remembered.

    With `discover_config` (a new run), the runtime config when `--config` is not
    given is the one `cli.config_file.find_config` finds for the manifest
    (`args.file`): beside it, else in the current directory; `args.config_choice`
    then says which file it is, for the command to tell.
    """
    options = dict(previous or {})
    if discover_config and not getattr(args, "config", None):
        found = find_config(getattr(args, "file", None))
        args.config_choice = found
        if found is not None:
            options["config"] = str(found.path)
    if getattr(args, "model", None):
        options["model"] = model_option(args.model)
    if getattr(args, "config", None):
        options["config"] = str(Path(args.config).resolve())
    if getattr(args, "tools", None):
        for path in args.tools:
            check_input_file(path, flag="--tools")
        options["tools"] = [str(Path(path).resolve()) for path in args.tools]
    return options


def runtime_config(options: dict[str, Any]) -> RuntimeConfig | None:
    """The runtime config a run's options name, its `limits` put in effect."""
    if not options.get("config"):
        return None
    from agent_runtime.config import load_config  # noqa: PLC0415 - only with a config

    config = load_config(options["config"])
    set_limits(config.limits)
    return config


def check_sinks(args: argparse.Namespace, *, artifacts: bool = True) -> None:
    """Refuse an `--events` or (unless told not to) `--artifacts` path that cannot be
    one, before opening any."""
    events = getattr(args, "events", None)
    if events and events != "none":
        check_output_file(events, flag="--events")
    directory = getattr(args, "artifacts", None) if artifacts else None
    if directory and directory != "none":
        check_output_directory(directory, flag="--artifacts")
