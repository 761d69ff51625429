"""Short, escaped quotes of user and model data for messages and terminals.

Data that a user or a model chose (a model's answer, a tool name, a webhook
body, a variable value) may be long, secret or hostile. Two rules keep it in
its place:

- ``excerpt`` is the only way such data enters an error message: a bounded,
  repr-like quote in which every character that could steer a terminal or a
  log viewer is escaped, so a message says *what* was wrong without echoing
  the value whole.
- ``printable`` is applied to text written to a terminal on purpose (a run's
  output, model text in the live view, ids): it keeps the text readable and
  multi-line but escapes control characters, so an answer containing
  ``\\x1b]0;pwned\\x07`` prints as visible ``\\x1b``, never as an escape
  sequence the terminal obeys.
- ``escape_json_text`` does the same for JSON printed to a terminal (still
  the same JSON), and ``fingerprint`` stands in for a name an event must not
  carry (a tool the model named).

Escaped characters, in all three: C0 controls, DEL, C1 controls, Unicode
format characters (bidi overrides and isolates U+202A-U+202E and
U+2066-U+2069, marks, zero-width characters), line and paragraph separators
(U+2028, U+2029) and lone surrogates. They are written as ``\\n``, ``\\t``,
``\\r``, ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``, like Python's ``repr``.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata

__all__ = ["EXCERPT_LIMIT", "escape_json_text", "excerpt", "fingerprint", "printable"]

# The longest excerpt of user data a message carries, in escaped characters.
EXCERPT_LIMIT = 80

_ELLIPSIS = "…"
# Unicode categories whose characters are invisible or act on the display:
# controls, format characters (bidi, zero-width), surrogates, line and
# paragraph separators.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


_SHORT_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape_char(char: str) -> str:
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _needs_escape(char: str) -> bool:
    return unicodedata.category(char) in _ESCAPED_CATEGORIES


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)
    except (TypeError, ValueError):  # circular structures, exotic keys
        return repr(value)


def excerpt(value: object, limit: int = EXCERPT_LIMIT) -> str:
    """Quote ``value`` briefly and safely for an error message.

    A string is shown double-quoted, with backslashes and double quotes
    escaped, so the quote is unambiguous; anything else is shown as its JSON
    text, unquoted (``{"a": 1}``, ``42``). At most ``limit`` characters of
    content are kept and control characters are escaped, so the excerpt is
    inert in a terminal. When the value is cut, the excerpt ends with an
    ellipsis and the value's total length, for example
    ``"abcd…" (1200 chars)``.
    """
    quote = '"' if isinstance(value, str) else ""
    text = _as_text(value)
    pieces: list[str] = []
    used = 0
    cut = False
    for char in text:
        if quote and char in '\\"':
            piece = "\\" + char
        elif _needs_escape(char):
            piece = _escape_char(char)
        else:
            piece = char
        if used + len(piece) > limit:
            cut = True
            break
        pieces.append(piece)
        used += len(piece)
    quoted = quote + "".join(pieces)
    if cut:
        return f"{quoted}{_ELLIPSIS}{quote} ({len(text)} chars)"
    return quoted + quote


def fingerprint(text: str) -> str:
    """A short, stable stand-in for a name an event must not carry: the first
    12 hex digits of its SHA-256. Whoever knows the candidates (the configured
    tool names) can match it; the name itself is not revealed."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def printable(text: str, *, multiline: bool = True) -> str:
    """Escape ``text`` for a terminal.

    With ``multiline`` (for output that is multi-line by intent: a run's
    answer, streamed model text) ``\\n`` and ``\\t`` pass through so the text
    still reads as written; every other control or format character,
    including ``\\r`` (which could overwrite a line) and ESC, is escaped as in
    ``excerpt``. Without it (ids, names, one-line fields) newlines and tabs
    are escaped too, so a value cannot break the line it is printed on.
    Backslashes are left alone, so ordinary text prints unchanged; the output
    is for people, not for parsing back. Nothing is truncated.
    """
    if text.isprintable():  # fast path: nothing to escape, no newline or tab
        return text
    kept = "\n\t" if multiline else ""
    return "".join(_escape_char(char) if char not in kept and _needs_escape(char) else char
                   for char in text)


def escape_json_text(text: str) -> str:
    """JSON text made inert for a terminal, still the same JSON.

    ``json.dumps(..., ensure_ascii=False)`` escapes C0 controls but leaves
    DEL, C1 controls (``\\x9b`` is a CSI on some terminals), bidi and other
    format characters and lone surrogates (which cannot even be encoded as
    UTF-8) as they are. Outside strings JSON text is ASCII, so each of those
    characters sits inside a string, where ``\\uNNNN`` means the same. Raw
    newlines, tabs and carriage returns are the structural whitespace of
    indented JSON (``json.dumps`` escapes them inside strings) and stay.
    """
    if text.isprintable():
        return text
    return "".join(_json_escape(char) if char not in "\n\t\r" and _needs_escape(char)
                   else char for char in text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON spells astral characters
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
