"""The web console: static HTML, CSS and JavaScript modules, served by the HTTP API.

    page = console_page("/")                  # index.html
    page = console_page("/console/app.js")    # an asset; None when there is none

The console has no build step: the files in this package are what the
browser runs. It talks to the API only through its public routes, with the
bearer token the user gives it. The routes (`agent_runtime.api.routes`)
serve these pages with `CONSOLE_HEADERS`: a Content-Security-Policy that
allows scripts, styles and requests from this origin only, no inline script
or style, no plugins, no framing, and Trusted Types enforced, so that no
code path can turn a string (a model's output, a variable) into HTML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

# What a console file may be named in a URL: no directories, no dotfiles.
ASSET_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,99}$"
_ASSET = re.compile(ASSET_PATTERN)

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".yaml": "text/yaml; charset=utf-8",
}

CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
    "require-trusted-types-for 'script'",
    "trusted-types 'none'",
])

CONSOLE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    # The token never travels in a URL after the first load, but no page
    # address should leave this origin either.
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}


@dataclass(frozen=True)
class ConsolePage:
    body: str
    content_type: str


def console_page(path: str) -> ConsolePage | None:
    """The console file a URL path names (`/`, `/console/NAME`,
    `/console/examples/NAME`), or None when there is no such file."""
    if path in ("/", "/console", "/console/"):
        return _read("index.html")
    for prefix, folder in (("/console/examples/", "examples"), ("/console/", "")):
        if path.startswith(prefix):
            return _read(path[len(prefix):], folder)
    return None


def _read(name: str, folder: str = "") -> ConsolePage | None:
    if not _ASSET.fullmatch(name):
        return None
    suffix = name[name.rfind("."):] if "." in name else ""
    content_type = CONTENT_TYPES.get(suffix)
    if content_type is None:
        return None
    root = resources.files(__name__)
    entry = root.joinpath(folder, name) if folder else root.joinpath(name)
    if not entry.is_file():
        return None
    return ConsolePage(body=entry.read_text(encoding="utf-8"), content_type=content_type)
