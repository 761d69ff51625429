"""Limits on what a user hands the runtime: sizes, nesting, numbers and condition cost.

Every manifest, variable, flag and file is treated as hostile until bounded.
The defaults (docs/limits.md) suit any manifest a person writes; a host
raises or lowers them in its runtime config:

    limits:
      manifestBytes: 2097152        # a manifest file or request body
      variablesBytes: 1048576       # --variables, @file, approve --response, effects --result
      maxDepth: 64                  # levels of nesting in any value
      maxValues: 100000             # values in one document (aliases expanded)
      maxStringLength: 1048576      # characters in one string
      maxIntegerDigits: 100         # decimal digits of an integer
      conditionLength: 16384        # characters of a `when`/`condition`/`goal`
      conditionCost: 1000000        # work units of one evaluation

The limits in effect are a context variable (`current_limits()`), as
`decimal`'s context is: the CLI sets the config's limits for the command it
runs, and every reader (`manifest_input`, `variables`, `conditions`) asks for
them where it needs them, so no signature has to carry them.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agent_runtime.errors import InvalidInput, NotFound

__all__ = ["CONFIG_BYTES", "DEFAULT_LIMITS", "EVENT_LINE_BYTES", "InputLimits",
           "current_limits", "decode_utf8", "describe_size", "read_bounded", "reset_limits",
           "set_limits", "use_limits"]

MIB = 1024 * 1024
CONFIG_BYTES = MIB
"""The runtime config file itself, read before its own `limits` are known."""
EVENT_LINE_BYTES = 16 * MIB
"""One line of a JSONL event log read by `agent-runtime events`."""


class InputLimits(BaseModel):
    """The bounds on input; the `limits:` section of the runtime config."""

    # Built when a config first sets limits: a command that keeps the defaults
    # (`validate`, `--help`) does not pay for a validator it never uses.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True,
                              defer_build=True)

    manifest_bytes: int = Field(default=2 * MIB, ge=1024, le=1024 * MIB, alias="manifestBytes")
    variables_bytes: int = Field(default=MIB, ge=1024, le=1024 * MIB, alias="variablesBytes")
    # Past a few hundred levels the parsers (json, libyaml, pydantic) recurse
    # into their own limits; the guard's iterative walk would not be reached.
    max_depth: int = Field(default=64, ge=8, le=500, alias="maxDepth")
    max_values: int = Field(default=100_000, ge=100, le=100_000_000, alias="maxValues")
    max_string_length: int = Field(default=MIB, ge=1024, le=1024 * MIB, alias="maxStringLength")
    # Python refuses to convert integers past 4,300 digits to and from text.
    max_integer_digits: int = Field(default=100, ge=16, le=4000, alias="maxIntegerDigits")
    condition_length: int = Field(default=16_384, ge=256, le=MIB, alias="conditionLength")
    condition_cost: int = Field(default=1_000_000, ge=1000, le=1_000_000_000,
                                alias="conditionCost")


DEFAULT_LIMITS = InputLimits.model_construct()  # the field defaults, which are in bounds
_CURRENT: contextvars.ContextVar[InputLimits] = contextvars.ContextVar(
    "agent_runtime_limits", default=DEFAULT_LIMITS)


def current_limits() -> InputLimits:
    """The limits in effect here: the host's, or the defaults."""
    return _CURRENT.get()


def set_limits(limits: InputLimits) -> contextvars.Token[InputLimits]:
    """Put `limits` in effect for the rest of this context; undo with `reset_limits`."""
    return _CURRENT.set(limits)


def reset_limits(token: contextvars.Token[InputLimits]) -> None:
    """The limits in effect before the `set_limits` that returned `token`."""
    _CURRENT.reset(token)


@contextlib.contextmanager
def use_limits(limits: InputLimits) -> Iterator[InputLimits]:
    """`limits` in effect inside the block (tasks started inside inherit them)."""
    token = _CURRENT.set(limits)
    try:
        yield limits
    finally:
        _CURRENT.reset(token)


def describe_size(count: int) -> str:
    """`2097152` -> `2 MiB`, for messages."""
    if count >= MIB and count % MIB == 0:
        return f"{count // MIB} MiB"
    if count >= 1024 and count % 1024 == 0:
        return f"{count // 1024} KiB"
    return f"{count:,} bytes"


def read_bounded(path: str | Path, limit: int, *, what: str,
                 error: type[InvalidInput] = InvalidInput,
                 missing: type[InvalidInput] = NotFound) -> bytes:
    """At most `limit` bytes of the file at `path`, never more read; raises `error`.

    `/dev/zero`, a 50 MB file or a FIFO fed forever cost `limit + 1` bytes
    before they are refused. A missing file raises `missing` (the CLI's "not
    found"), a directory or an unreadable path `error`, each naming the path.
    `what` names the file in messages ("manifest", "variables file").
    """
    source = str(path)
    try:
        with open(path, "rb") as file:  # a directory is refused here (EISDIR)
            data = file.read(limit + 1)
    except FileNotFoundError:
        raise missing(f"cannot read the {what}: file not found", source=source) from None
    except OSError as exc:
        raise error(_os_reason(exc, what), source=source) from None
    except ValueError:  # an embedded NUL
        raise error("the path contains a NUL character", source=source) from None
    if len(data) > limit:
        raise error(f"the {what} is larger than the limit of {describe_size(limit)}", source=source)
    return data


def _os_reason(exc: OSError, what: str) -> str:
    if exc.errno == errno.EISDIR:
        return f"is a directory, expected a {what}"
    if exc.errno == errno.ENOTDIR:
        return "a part of the path is a file, not a directory"
    if exc.errno == errno.ENAMETOOLONG:
        return "the file name is too long"
    return f"cannot read the {what}: {exc.strerror or type(exc).__name__}"


def decode_utf8(data: bytes, *, source: str, error: type[InvalidInput] = InvalidInput) -> str:
    """Bytes read from a file as text; not UTF-8 is `error` naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text ({exc.reason} at byte {exc.start})",
                    source=source) from None
