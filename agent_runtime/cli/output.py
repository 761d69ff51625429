"""Where the CLI writes: stdout and stderr that a closed pipe cannot break, and colour.

Output is not the run (docs/design.md section 6): `agent-runtime run ... | head -1`
closes stdout after one line, and the run must go on to its end regardless.
`TerminalStream` wraps a stream so that a write to a reader that went away
(`BrokenPipeError`, any `OSError` of the stream) marks it closed and is
dropped, and its file descriptor is pointed at /dev/null so the interpreter's
own flush at exit stays quiet too.

Colour: ANSI codes when the stream is a terminal and `NO_COLOR` is not set
(no-color.org); plain text otherwise, so what is piped is what is read.
"""

from __future__ import annotations

import contextlib
import os
from typing import TextIO, cast

_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
          "magenta": "35", "cyan": "36"}
STATUS_COLOURS = {"completed": "green", "failed": "red", "cancelled": "red",
                  "suspended": "yellow", "running": "cyan", "created": "blue"}


class TerminalStream:
    """A text stream whose writes never raise: a closed reader turns it into a sink."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.closed_by_reader = False
        self.colour = _wants_colour(stream)

    def write(self, text: str) -> int:
        if not self.closed_by_reader:
            try:
                self._stream.write(text)
            except (OSError, ValueError):  # ValueError: the stream itself was closed
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self.closed_by_reader:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._reader_gone()

    def isatty(self) -> bool:
        return self.colour

    def paint(self, text: str, *styles: str) -> str:
        """`text` in these styles on a colour terminal, as it is otherwise."""
        if not self.colour or not styles:
            return text
        codes = ";".join(_CODES[style] for style in styles)
        return f"\033[{codes}m{text}\033[0m"

    def reader_gone(self) -> None:
        """Drop everything from here on: the reader went away."""
        self._reader_gone()

    def _reader_gone(self) -> None:
        self.closed_by_reader = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            # What is still buffered would fail again at exit: send it nowhere.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)


def _wants_colour(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (OSError, ValueError, AttributeError):
        return False


def guarded(stream: TextIO) -> TextIO:
    """`stream` wrapped once (wrapping a `TerminalStream` again returns it)."""
    wrapped = stream if isinstance(stream, TerminalStream) else TerminalStream(stream)
    return cast(TextIO, wrapped)


def paint(out: TextIO, text: str, *styles: str) -> str:
    """`text` coloured when `out` is a colour terminal (a guarded one), else as it is."""
    return out.paint(text, *styles) if isinstance(out, TerminalStream) else text
