"""The answers of the public routes, computed once when `serve` starts.

`GET /openapi.json` and the web console's files need no credentials and never
change while a server runs, so anyone may ask for them as often as they like.
They are computed by the routes themselves (the same status, headers and bytes
as a request would get) before the server listens, and `ApiGuard` serves them
from memory: they never take a request slot, so no number of clients asking for
them can keep a slot from an authenticated API request.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from importlib import resources

from agent_runtime.api.answers import Answer, AsgiApp, Message, compute_answer

OPENAPI_PATH = "/openapi.json"


def public_paths() -> list[str]:
    """The URL paths of every public file: the OpenAPI document, the console's page,
    assets and examples (a path the routes do not answer with 200 is left out later)."""
    paths = [OPENAPI_PATH, "/"]
    console = resources.files("agent_runtime.console")
    for folder, prefix in ((console, "/console/"),
                           (console.joinpath("examples"), "/console/examples/")):
        if folder.is_dir():
            paths.extend(prefix + entry.name for entry in folder.iterdir() if entry.is_file())
    return sorted(paths)


def capture_public_answers(app: AsgiApp, paths: Iterable[str]) -> dict[str, Answer]:
    """`GET path` of each of `paths`, asked of `app` (the routes) once: path -> answer,
    for those answered 200. Runs on a thread of its own, so any caller may ask."""
    captured: dict[str, Answer] = {}
    failure: list[BaseException] = []

    def capture() -> None:
        try:
            captured.update(asyncio.run(_capture(app, list(paths))))
        except BaseException as error:  # re-raised on the caller's thread
            failure.append(error)

    thread = threading.Thread(target=capture, name="serve-public-pages")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return captured


async def _capture(app: AsgiApp, paths: list[str]) -> dict[str, Answer]:
    async def no_more() -> Message:
        return {"type": "http.disconnect"}

    answers: dict[str, Answer] = {}
    for path in paths:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
                 "root_path": "", "query_string": b"", "headers": [(b"host", b"localhost")],
                 "server": ("127.0.0.1", 0), "client": ("127.0.0.1", 0)}
        answer = await compute_answer(app, scope, b"", no_more)
        if answer is not None and answer.status == 200:
            answers[path] = answer
    return answers
