"""`agent-runtime serve`'s bearer tokens, tokens file, generated token file and Host check."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from aws_lambda_powertools.event_handler.http_resolver import HttpProxyEvent

from agent_runtime.api.local_auth import (
    BearerTokens,
    HostCheck,
    generate_token_file,
    load_token_file,
    single_token,
)
from agent_runtime.api.services import Unauthenticated
from agent_runtime.errors import ConfigError


def event(authorization: str | None) -> HttpProxyEvent:
    headers = {} if authorization is None else {"authorization": authorization}
    return HttpProxyEvent("GET", "/runs", headers=headers)


def test_a_bearer_token_names_its_tenant() -> None:
    tokens = BearerTokens({"alpha-token": "alpha", "beta-token": "beta"})
    assert tokens.tenant(event("Bearer alpha-token")) == "alpha"
    assert tokens.tenant(event("bearer   beta-token ")) == "beta"


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic alpha-token",
                                    "alpha-token", "Bearer alpha-tokenX", "Bearer alpha",
                                    "Bearer ä-token"])
def test_a_missing_or_wrong_token_is_unauthenticated(header: str | None) -> None:
    with pytest.raises(Unauthenticated):
        BearerTokens({"alpha-token": "alpha"}).tenant(event(header))


TOKEN_A = "token-of-team-a-0123456789abcdefgh"
TOKEN_B = "token-of-team-b-0123456789abcdefgh"


def private_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_single_token_is_tenant_local() -> None:
    assert single_token(TOKEN_A) == {TOKEN_A: "local"}


@pytest.mark.parametrize(("token", "reason"), [
    (" ", "visible ASCII"), ("abc", "is 3 characters long"), ("x" * 31, "is 31 characters"),
    ("ab" * 20, "only 2 different characters"), (f" {TOKEN_A}", "visible ASCII"),
    (TOKEN_A[:-1] + "ä", "visible ASCII")])
def test_a_short_or_guessable_token_flag_is_refused(token: str, reason: str) -> None:
    with pytest.raises(ConfigError) as refused:
        single_token(token)
    message = refused.value.render()
    assert "--token" in message and reason in message
    assert len(token) < 4 or token.strip() not in message  # the token is never echoed


def test_tokens_file_maps_tokens_to_tenants(tmp_path: Path) -> None:
    path = private_file(tmp_path / "tokens.yaml", f"{TOKEN_A}: team-a\n{TOKEN_B}: team-b\n")
    assert load_token_file(path) == {TOKEN_A: "team-a", TOKEN_B: "team-b"}
    path.chmod(0o400)  # stricter than 0600 is fine
    assert load_token_file(path) == {TOKEN_A: "team-a", TOKEN_B: "team-b"}


@pytest.mark.parametrize("text", ["", "[a, b]\n", "{}\n", f"{TOKEN_A}: ''\n",
                                  f"{TOKEN_A}: 3\n", "123: a\n", "'': a\n",
                                  f"{TOKEN_A}: [a]\n", "a: [\n"])
def test_a_bad_tokens_file_is_refused(tmp_path: Path, text: str) -> None:
    path = private_file(tmp_path / "tokens.yaml", text)
    with pytest.raises(ConfigError) as refused:
        load_token_file(path)
    assert str(path) in refused.value.render()


@pytest.mark.parametrize("text", [f"{TOKEN_A}: x: y\n", f"{TOKEN_A}: [team-a\n",
                                  f"team-b: ok\n{TOKEN_A}: 'team-a\n"])
def test_a_tokens_file_that_is_not_yaml_is_refused_without_quoting_it(
        tmp_path: Path, text: str) -> None:
    path = private_file(tmp_path / "tokens.yaml", text)
    with pytest.raises(ConfigError) as refused:
        load_token_file(path)
    message = refused.value.render()
    assert "not valid YAML at line" in message and str(path) in message
    assert TOKEN_A not in message and "team-" not in message


@pytest.mark.parametrize("short", ["t", "tok-b", "x" * 31])
def test_a_tokens_file_with_a_short_token_is_refused(tmp_path: Path, short: str) -> None:
    path = private_file(tmp_path / "tokens.yaml", f"{TOKEN_A}: team-a\n{short}: team-b\n")
    with pytest.raises(ConfigError) as refused:
        load_token_file(path)
    message = refused.value.render()
    assert str(path) in message
    assert f"token #2 is {len(short)} characters long" in message
    assert "at least 32" in message
    assert TOKEN_A not in message and f" {short}:" not in message


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o666, 0o620, 0o602])
def test_a_tokens_file_others_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = private_file(tmp_path / "tokens.yaml", f"{TOKEN_A}: team-a\n", mode)
    with pytest.raises(ConfigError) as refused:
        load_token_file(path)
    message = refused.value.render()
    assert str(path) in message
    assert f"mode {mode:04o}" in message and "chmod 600" in message
    assert TOKEN_A not in message


def test_a_tokens_file_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "tokens.fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_token_file(fifo)  # refused at once, not blocked waiting for a writer
    with pytest.raises(ConfigError, match="not a regular file"):
        load_token_file(tmp_path)


def test_a_missing_tokens_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_token_file(tmp_path / "absent.yaml")


def test_the_generated_token_passes_the_token_rules(tmp_path: Path) -> None:
    for _ in range(20):
        token = generate_token_file(tmp_path / "serve.token")
        assert single_token(token) == {token: "local"}


def test_the_generated_token_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / ".agent-runtime" / "serve.token"
    token = generate_token_file(path)
    assert len(token) >= 40
    assert path.read_text(encoding="utf-8").strip() == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_new_token_replaces_an_old_file_and_its_loose_mode(tmp_path: Path) -> None:
    path = tmp_path / "serve.token"
    path.write_text("old\n", encoding="utf-8")
    os.chmod(path, 0o644)
    token = generate_token_file(path)
    assert path.read_text(encoding="utf-8").strip() == token != "old"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["serve.token"]


def test_the_token_file_is_private_even_under_a_permissive_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        path = tmp_path / "serve.token"
        generate_token_file(path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(("bound", "port", "host", "allowed"), [
    ("127.0.0.1", 8000, "127.0.0.1:8000", True),
    ("127.0.0.1", 8000, "localhost:8000", True),
    ("127.0.0.1", 8000, "LOCALHOST:8000", True),
    ("127.0.0.1", 8000, "127.0.0.1:8001", False),
    ("127.0.0.1", 8000, "127.0.0.1", False),
    ("127.0.0.1", 8000, "evil.example:8000", False),
    ("127.0.0.1", 8000, "localhost.evil.example:8000", False),
    ("127.0.0.1", 8000, "[::1]:8000", False),
    ("127.0.0.1", 8000, "127.0.0.1:8000:8000", False),
    ("127.0.0.1", 8000, "", False),
    ("::1", 8000, "[::1]:8000", True),
    ("::1", 8000, "localhost:8000", True),
    ("::1", 8000, "::1:8000", False),
    ("::1", 8000, "[::1]x:8000", False),
    ("0.0.0.0", 8000, "192.168.1.5:8000", True),
    ("0.0.0.0", 8000, "localhost:8000", True),
    ("0.0.0.0", 8000, "rebind.example:8000", False),
    ("127.0.0.1", 80, "127.0.0.1", True),
    ("localhost", 9000, "localhost:9000", True),
    ("localhost", 9000, "127.0.0.1:9000", True),
    ("localhost", 9000, "[::1]:9000", True),
    ("localhost", 9000, "evil.example:9000", False),
    ("myhost.lan", 9000, "myhost.lan:9000", True),
    ("myhost.lan", 9000, "other.lan:9000", False),
])
def test_host_header_must_name_the_bound_address(bound: str, port: int, host: str,
                                                 allowed: bool) -> None:
    assert HostCheck(bound, port).allows(host) is allowed
