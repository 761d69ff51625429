"""Who may call `agent-runtime serve`: bearer tokens, and the Host the server answers to.

Locally every request carries `Authorization: Bearer <token>`; the token
names the caller's tenant. The tokens come from `--token T` (tenant
`local`), from `--tokens FILE` (a YAML mapping token -> tenant, for several
tenants), or, given neither, from a random token generated at start and
written to `.agent-runtime/serve.token` with mode 0600, so only the user
who started the server can read it.

A token is all that stands between a tenant and another's runs, and nothing
limits how fast one may be guessed: every token given must be at least
`MIN_TOKEN_LENGTH` (32) visible ASCII characters with at least
`MIN_DISTINCT_CHARACTERS` (8) different ones (the generated one is 43
URL-safe characters, 256 random bits), and the tokens file, which holds
every tenant's token, must be a regular file readable by its owner only
(mode 0600 or stricter, as ssh asks of a private key). Every refusal names
the file or flag and the reason, never a token or a line of the file.

A browser on the same machine can be made to send requests to 127.0.0.1 by
any web page; the token stops those. A page can also point a DNS name of
its own at 127.0.0.1 (DNS rebinding) and then read the answers as
same-origin: `HostCheck` refuses any `Host` that is not the address the
server is bound to.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from agent_runtime.api.services import Unauthenticated
from agent_runtime.errors import ConfigError
from agent_runtime.run_options import LOCAL_TENANT

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

DEFAULT_TOKEN_FILE = "./.agent-runtime/serve.token"
MIN_TOKEN_LENGTH = 32
MIN_DISTINCT_CHARACTERS = 8
# A tokens file maps tokens to tenants: a few lines per tenant, never megabytes.
MAX_TOKEN_FILE_BYTES = 1024 * 1024
GENERATE_HINT = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))' makes one"


class BearerTokens:
    """An `Authenticator`: `Authorization: Bearer <token>` -> the token's tenant."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        if not tokens:
            raise ValueError("at least one token is needed")
        # Compared as bytes: hmac.compare_digest refuses non-ASCII str.
        self._tokens = [(token.encode("utf-8"), tenant) for token, tenant in tokens.items()]

    def tenant(self, event: BaseProxyEvent) -> str:
        header = event.headers.get("authorization") or event.headers.get("Authorization")
        scheme, _, credentials = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise Unauthenticated("send the token as `Authorization: Bearer <token>`")
        offered = credentials.strip().encode("utf-8")
        found: str | None = None
        # Every token is compared, in constant time each, so the time taken
        # tells nothing about which token (or how much of one) matched.
        for token, tenant in self._tokens:
            if hmac.compare_digest(offered, token):
                found = tenant
        if found is None:
            raise Unauthenticated("the bearer token is not valid for this server")
        return found


def token_problem(token: object) -> str | None:
    """Why `token` cannot be a bearer token of this server, or None. Never quotes it."""
    if not isinstance(token, str) or not token:
        return "must be a non-empty string (quote numbers in YAML)"
    if not all("!" <= char <= "~" for char in token):
        return ("must be visible ASCII characters only (no spaces; an HTTP header carries "
                "nothing else)")
    if len(token) < MIN_TOKEN_LENGTH:
        return (f"is {len(token)} characters long; a token needs at least "
                f"{MIN_TOKEN_LENGTH} ({GENERATE_HINT})")
    if len(set(token)) < MIN_DISTINCT_CHARACTERS:
        return (f"has only {len(set(token))} different characters; a token needs at least "
                f"{MIN_DISTINCT_CHARACTERS} to be hard to guess ({GENERATE_HINT})")
    return None


def single_token(token: str) -> dict[str, str]:
    """`--token T`: one token, tenant `local`."""
    problem = token_problem(token)
    if problem is not None:
        raise ConfigError(f"the token {problem}", source="--token")
    return {token: LOCAL_TENANT}


def load_token_file(path: str | Path) -> dict[str, str]:
    """`--tokens FILE`: a YAML mapping of token -> tenant, at least one entry, in a
    regular file that only its owner may read or write."""
    source = str(path)
    text = _read_private_file(Path(path), source)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        # PyYAML's message quotes the offending line, a token: only where and what.
        raise ConfigError(f"not valid YAML{_where(error)}", source=source) from None
    if not isinstance(data, dict) or not data:
        raise ConfigError("expected a mapping of token -> tenant with at least one entry",
                          source=source)
    tokens: dict[str, str] = {}
    for number, (token, tenant) in enumerate(data.items(), start=1):
        problem = token_problem(token)
        if problem is not None:
            raise ConfigError(f"token #{number} {problem}", source=source)
        if not isinstance(tenant, str) or not tenant.strip():
            raise ConfigError(f"the tenant of token #{number} must be a non-empty "
                              "string", source=source)
        tokens[token] = tenant
    return tokens


def _where(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None)
    at = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
    return f"{at}: {problem}" if problem else at


def _read_private_file(path: Path, source: str) -> str:
    """The file's text, checked on the open file itself (no swap between check and read)."""
    try:
        # Non-blocking: a FIFO named as the file must not hang the start.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise ConfigError(f"cannot read the tokens file: {error.strerror}",
                          source=source) from error
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError("the tokens file is not a regular file", source=source)
        mode = stat.S_IMODE(info.st_mode)
        if os.name == "posix" and mode & 0o077:
            raise ConfigError(
                f"the tokens file has mode {mode:04o}: it holds every tenant's token, so group "
                f"and others must have no access (chmod 600 {source})", source=source)
        with open(fd, "rb", closefd=False) as opened:
            data = opened.read(MAX_TOKEN_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise ConfigError(f"the tokens file is larger than {MAX_TOKEN_FILE_BYTES:,} bytes",
                          source=source)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"the tokens file is not UTF-8 text (byte {error.start})",
                          source=source) from None


def generate_token_file(path: str | Path = DEFAULT_TOKEN_FILE) -> str:
    """A new random token for tenant `local`, written to `path` readable by this user only.

    The file is created under a temporary name with mode 0600 from the
    start (never world-readable, not even between create and chmod; an old
    file's looser mode is not inherited) and renamed over the old one.
    """
    token = secrets.token_urlsafe(32)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask may only have removed bits; make it exact
        os.write(fd, (token + "\n").encode("ascii"))
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(temporary, target)
    return token


def read_generated_token(path: str | Path = DEFAULT_TOKEN_FILE) -> dict[str, str]:
    """The token `generate_token_file` wrote, tenant `local`: how the children of
    `serve --processes` take their supervisor's new token."""
    token = _read_private_file(Path(path), str(path)).strip()
    problem = token_problem(token)
    if problem is not None:
        raise ConfigError(f"the token {problem}", source=str(path))
    return {token: LOCAL_TENANT}


class HostCheck:
    """Which `Host` header values the server answers to (DNS rebinding protection).

    Bound to one address: that address and, for a loopback address,
    `localhost`, each with the bound port. Bound to every address (0.0.0.0
    or ::): any IP literal or `localhost` with the port; a rebinding attack
    always arrives with the attacker's own domain name in `Host`.
    """

    def __init__(self, host: str, port: int) -> None:
        self.port = port
        self.any_address = False
        self.names: set[str] = set()
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            name = host.lower().rstrip(".")
            # `localhost` binds a loopback address, which clients may name too.
            self.names = {name, "127.0.0.1", "::1"} if name == "localhost" else {name}
            return
        if address.is_unspecified:
            self.any_address = True
            self.names = {"localhost"}
            return
        self.names = {address.compressed}
        if address.is_loopback:
            self.names.add("localhost")

    def allows(self, header: str) -> bool:
        value = header.strip().lower()
        if value.startswith("["):
            literal, _, rest = value[1:].partition("]")
            if rest and not rest.startswith(":"):
                return False
            name, port_text = literal, rest[1:]
        else:
            name, _, port_text = value.partition(":")
            if ":" in port_text:
                return False
        if port_text:
            if not port_text.isdigit() or int(port_text) != self.port:
                return False
        elif self.port != 80:
            return False
        name = name.rstrip(".")
        if name in self.names:
            return True
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return False
        return self.any_address or address.compressed in self.names

    def describe(self) -> str:
        if self.any_address:
            return f"an IP address or localhost, port {self.port}"
        shown = sorted(f"[{name}]" if ":" in name else name for name in self.names)
        return " or ".join(f"{name}:{self.port}" for name in shown)
