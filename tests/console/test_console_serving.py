"""How the console is shipped and served: every file in the package data, each URL to
its file with its type, nothing else reachable, the examples it offers equal to the
repository's, and a server that answers a browser's parallel requests."""

from __future__ import annotations

import json
import tomllib
from concurrent.futures import ThreadPoolExecutor
from fnmatch import fnmatch
from pathlib import Path

import httpx
import pytest
from browser import REPO

from agent_runtime.console import console_page
from tests.api.serve_process import Serve

CONSOLE = REPO / "agent_runtime" / "console"


def console_files() -> list[Path]:
    return sorted(path for path in CONSOLE.rglob("*")
                  if path.is_file() and path.suffix != ".py" and "__pycache__" not in path.parts)


def test_every_console_file_is_package_data() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["agent_runtime.console"]
    missing = [str(path.relative_to(CONSOLE)) for path in console_files()
               if not any(fnmatch(str(path.relative_to(CONSOLE)), pattern)
                          for pattern in patterns)]
    assert not missing, f"not in pyproject's package-data, so not in a wheel: {missing}"


def test_every_console_file_is_served_with_its_type() -> None:
    for path in console_files():
        relative = path.relative_to(CONSOLE).as_posix()
        page = console_page(f"/console/{relative}")
        assert page is not None, relative
        assert page.body == path.read_text(encoding="utf-8")
    index = console_page("/")
    assert index is not None and index.content_type == "text/html; charset=utf-8"
    script = console_page("/console/app.js")
    assert script is not None and script.content_type.startswith("text/javascript")


@pytest.mark.parametrize("path", [
    "/console/__init__.py", "/console/../api/routes.py", "/console/.hidden.js",
    "/console/examples/../app.js", "/console/missing.js", "/console/examples/index.yaml",
    "/runs", "/console/examples/nested/x.yaml"])
def test_nothing_but_console_files_is_served(path: str) -> None:
    assert console_page(path) is None


def test_the_examples_offered_are_the_repositorys_own() -> None:
    index = json.loads((CONSOLE / "examples" / "index.json").read_text(encoding="utf-8"))
    offered = {entry["file"] for entry in index["examples"]}
    assert offered == {path.name for path in (CONSOLE / "examples").glob("*.yaml")}
    for entry in index["examples"]:
        copy = (CONSOLE / "examples" / entry["file"]).read_text(encoding="utf-8")
        source = (REPO / entry["source"]).read_text(encoding="utf-8")
        assert copy == source, (f"agent_runtime/console/examples/{entry['file']} differs from "
                                f"{entry['source']}: copy it again")


@pytest.mark.slow
def test_serve_answers_many_parallel_requests(server: Serve) -> None:
    # A browser opens several connections at once; the thread pool behind the
    # routes once deadlocked on six.
    paths = ["/", "/console/app.js", "/console/dom.js", "/runs", "/openapi.json"] * 10

    def fetch(path: str) -> int:
        with server.client() as http:
            return http.get(path, timeout=60.0).status_code

    with ThreadPoolExecutor(max_workers=len(paths)) as pool:
        statuses = list(pool.map(fetch, paths))
    assert statuses == [200] * len(paths)


def test_console_routes_stay_out_of_the_api_description(client: httpx.Client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "/" not in paths
    assert not any(path.startswith("/console") for path in paths)


@pytest.mark.parametrize(("path", "content_type"), [
    ("/", "text/html; charset=utf-8"), ("/console/app.js", "text/javascript; charset=utf-8"),
    ("/console/examples/index.json", "application/json")])
def test_the_console_is_served_behind_api_gateway(path: str, content_type: str) -> None:
    # The routes as functions/api/app.py serves them (HTTP API payload 2.0), with no
    # caller: the console's files need no credentials, and its CSP comes along.
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

    from agent_runtime.api.routes import include_routes
    from tests.functions.aws_stack import http_event

    resolver = APIGatewayHttpResolver(enable_validation=True)
    include_routes(resolver, None)
    event = http_event("api-openapi.json", caller=None)
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["routeKey"] = event["requestContext"]["routeKey"] = "GET " + path
    response = resolver.resolve(event, None)
    assert response["statusCode"] == 200, response
    headers = {name.lower(): value for name, value in response["headers"].items()}
    assert headers["content-type"] == content_type
    assert "script-src 'self'" in headers["content-security-policy"]
    assert response["isBase64Encoded"] is False
    assert response["body"] == (CONSOLE / ("index.html" if path == "/" else
                                           path.removeprefix("/console/"))).read_text("utf-8")


def test_a_missing_browser_fails_the_console_tests_unless_opted_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from browser import OPT_OUT, chromium_path

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CHROMIUM", raising=False)
    monkeypatch.delenv(OPT_OUT, raising=False)
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        chromium_path()
    monkeypatch.setenv(OPT_OUT, "1")
    with pytest.raises(pytest.skip.Exception):
        chromium_path()
