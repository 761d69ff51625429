"""The HTTP API's routes driven through a real Powertools resolver, over a real store and engine.

`Api(store)` builds the routes on `OneHopResolver`, as `serve` does (requests go through its
ASGI interface, as under uvicorn) or, with `kind="aws"`, on
`APIGatewayHttpResolver` (requests are API Gateway HTTP API v2 events). Runs
execute with `InlineLauncher`: a synchronous `Launcher` that executes the
attempt with the engine before the request returns.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlencode

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, HttpResolverLocal

from agent_runtime.api import ApiLimits, ApiServices, Unauthenticated, build_api
from agent_runtime.api.one_hop_resolver import OneHopResolver
from agent_runtime.engine import AgentRuntime
from agent_runtime.policy import HostPolicy
from agent_runtime.testing import FakeClock
from stores.base import RunStore
from stores.records import Budget, RunRecord

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
ECHO = {"model": "scripted/echo"}
TOKENS = {"alice-token": "alice", "bob-token": "bob"}
_UNSET: Any = object()


def manifest_text(name: str) -> str:
    return (MANIFESTS / name).read_text(encoding="utf-8")


class TokenAuthenticator:
    """`Authorization: Bearer <token>`, a token per tenant."""

    def tenant(self, event: Any) -> str:
        header = event.headers.get("authorization") or ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or token not in TOKENS:
            raise Unauthenticated("a bearer token is required")
        return TOKENS[token]


class InlineLauncher:
    """A synchronous `Launcher`: executes the attempt with the engine before returning.

    The attempt runs on a thread of its own, since a route may be called on a
    running event loop (the ASGI path). What the attempt raises (a lease held
    by a concurrent executor) is raised to the route.
    """

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime
        self.started: list[str] = []
        self.resumed: list[tuple[str, str, Budget | None]] = []

    def start(self, run: RunRecord) -> None:
        self.started.append(run.run_id)
        self._execute(run.run_id, None)

    def resume(self, run: RunRecord, *, reason: str, budget: Budget | None = None) -> None:
        self.runtime.store.request_resume(run.run_id, at=self.runtime.clock.now(), reason=reason)
        self.resumed.append((run.run_id, reason, budget))
        self._execute(run.run_id, budget)

    def _execute(self, run_id: str, budget: Budget | None) -> None:
        failures: list[BaseException] = []

        def attempt() -> None:
            try:
                asyncio.run(self.runtime.run(run_id=run_id, resume=True, budget=budget))
            except BaseException as error:  # handed to the route
                failures.append(error)

        worker = threading.Thread(target=attempt)
        worker.start()
        worker.join()
        if failures:
            raise failures[0]


class RecordingLauncher(InlineLauncher):
    """Records what it is asked and executes nothing: the run waits for the reconciler."""

    def _execute(self, run_id: str, budget: Budget | None) -> None:
        return None


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    text: str
    body: Any = field(default=None)

    @property
    def run(self) -> dict[str, Any]:
        run: dict[str, Any] = self.body["run"]
        return run

    @property
    def problem(self) -> dict[str, Any]:
        assert self.headers.get("content-type") == "application/problem+json", self
        assert {"type", "title", "status", "detail"} <= set(self.body), self.body
        assert self.body["status"] == self.status
        problem: dict[str, Any] = self.body
        return problem


class Api:
    def __init__(self, store: RunStore, *, kind: str = "local", runtime: AgentRuntime | None = None,
                 limits: ApiLimits | None = None, launcher: InlineLauncher | None = None) -> None:
        self.store = store
        self.clock = FakeClock()
        # The routes' host, as serve and the API Lambda build it: the safe default policy.
        self.runtime = runtime or AgentRuntime(store=store, clock=self.clock, owner="api-test",
                                               policy=HostPolicy())
        self.launcher = launcher or InlineLauncher(self.runtime)
        self.kind = kind
        self.resolver: HttpResolverLocal | APIGatewayHttpResolver = (
            OneHopResolver(enable_validation=True) if kind == "local"
            else APIGatewayHttpResolver(enable_validation=True))
        # Locally each request is answered on a worker thread, as `serve` has it.
        build_api(self.resolver, ApiServices(store=store, runtime=self.runtime,
                                             launcher=self.launcher,
                                             authenticator=TokenAuthenticator(),
                                             limits=limits or ApiLimits()))

    # -- requests ------------------------------------------------------------------

    def request(self, method: str, path: str, *, json_body: Any = _UNSET,
                body: bytes | str | None = None, query: dict[str, Any] | None = None,
                headers: dict[str, str] | None = None, token: str | None = "alice-token",
                content_type: str | None = "application/json") -> Reply:
        sent = dict(headers or {})
        if token is not None:
            sent.setdefault("Authorization", f"Bearer {token}")
        if json_body is not _UNSET:
            body = json.dumps(json_body)
        if body is not None and content_type is not None:
            sent.setdefault("Content-Type", content_type)
        raw = body.encode() if isinstance(body, str) else body
        query_string = urlencode(query or {}, doseq=True)
        if self.kind == "local":
            status, got, text = self._asgi(method, path, query_string, sent, raw)
        else:
            status, got, text = self._lambda(method, path, query_string, sent, raw)
        reply = Reply(status=status, headers={k.lower(): v for k, v in got.items()}, text=text)
        if reply.headers.get("content-type", "").endswith("json") and text:
            reply.body = json.loads(text)
        assert status < 500 or reply.headers.get("content-type") == "application/problem+json"
        return reply

    def get(self, path: str, **options: Any) -> Reply:
        return self.request("GET", path, **options)

    def post(self, path: str, json_body: Any = _UNSET, **options: Any) -> Reply:
        return self.request("POST", path, json_body=json_body, **options)

    def _asgi(self, method: str, path: str, query: str, headers: dict[str, str],
              body: bytes | None) -> tuple[int, dict[str, str], str]:
        scope = {"type": "http", "method": method, "path": path,
                 "query_string": query.encode(),
                 "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body or b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        asyncio.run(self.resolver(scope, receive, send))  # type: ignore[arg-type]
        start = next(m for m in sent if m["type"] == "http.response.start")
        text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return (start["status"], {k.decode(): v.decode() for k, v in start["headers"]},
                text.decode())

    def _lambda(self, method: str, path: str, query: str, headers: dict[str, str],
                body: bytes | None) -> tuple[int, dict[str, str], str]:
        params: dict[str, str] = {}
        for pair in query.split("&") if query else []:
            key, _, value = pair.partition("=")
            # API Gateway hands a Lambda the parameters decoded.
            key, value = unquote(key), unquote(value)
            params[key] = f"{params[key]},{value}" if key in params else value
        binary = body is not None and not _is_utf8(body)
        event = {
            "version": "2.0", "routeKey": "$default", "rawPath": path, "rawQueryString": query,
            "headers": {k.lower(): v for k, v in headers.items()},
            "queryStringParameters": params or None,
            "requestContext": {"accountId": "123456789012", "apiId": "api", "stage": "$default",
                               "domainName": "api.example", "domainPrefix": "api",
                               "requestId": "request", "routeKey": "$default",
                               "time": "01/Jan/2026:00:00:00 +0000", "timeEpoch": 0,
                               "http": {"method": method, "path": path, "protocol": "HTTP/1.1",
                                        "sourceIp": "127.0.0.1", "userAgent": "test"}},
            "body": None if body is None else (base64.b64encode(body).decode() if binary
                                               else body.decode()),
            "isBase64Encoded": binary,
        }
        response = self.resolver.resolve(event, None)  # type: ignore[arg-type]
        return response["statusCode"], dict(response.get("headers") or {}), response["body"]

    # -- shortcuts -------------------------------------------------------------------

    def start(self, name: str = "approval.agent.yaml", *, token: str = "alice-token",
              **fields: Any) -> dict[str, Any]:
        """POST /runs with a fixture manifest (as YAML text) and the scripted model."""
        body = {"manifest": manifest_text(name), "options": ECHO, **fields}
        reply = self.post("/runs", body, token=token)
        assert reply.status == 201, reply
        return reply.run


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
