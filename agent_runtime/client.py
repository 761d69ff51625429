"""`AgentRuntimeClient`: the HTTP API from Python, typed, for `serve` and API Gateway alike.

    with AgentRuntimeClient("http://127.0.0.1:8000", token=TOKEN) as client:
        run = client.create_run(manifest, variables={"topic": "checkpoints"})
        run = client.wait(run.run_id)             # until it completes, fails or suspends
        if run.suspension and run.suspension.reason == "approval":
            answered = client.approve(run.run_id, run.suspension.details["approvalId"])
            run = client.wait(run.run_id, past=answered)   # the resumed attempt's end

Answers are the API's own wire models (`agent_runtime.api.wire`: `RunView`,
`EffectView`, ...), validated as they arrive. Every error answer (RFC 9457
problem+json) raises `ApiError` with its status, `detail` and `field`; a 429
or 503 carries `retry_after`, the seconds the server asked the client to wait.
Nothing is retried behind the caller's back: a `POST /runs` repeated after a
lost answer is safe only with an `idempotency_key`. The one exception is
`events(follow=True)`, which only reads: it long-polls the run's event log and,
when a request fails on the way (a dropped connection, 429, 502-504), asks
again from the last cursor it yielded, so no event is lost or repeated.

Credentials: `token` (a `serve` bearer token), or `auth`, any `httpx.Auth`;
`SigV4Auth` signs requests for an API Gateway stage with IAM authorisation,
with botocore's signer and credentials (`pip install boto3`).
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel
from stores.records import RunStatus

from agent_runtime.api.event_wire import EventPage, EventView
from agent_runtime.api.wire import (
    KEY_PATTERN,
    Caller,
    CheckpointEnvelope,
    CheckpointList,
    CheckpointState,
    CheckpointSummary,
    EffectList,
    EffectView,
    RunEnvelope,
    RunList,
    RunOutput,
    RunView,
)

M = TypeVar("M", bound=BaseModel)

_SEGMENT = re.compile(KEY_PATTERN.strip("^$"))

# A run in one of these is still under way: `wait` keeps polling.
UNDER_WAY = frozenset({RunStatus.CREATED, RunStatus.RUNNING})
# Answers after which `events(follow=True)` asks again: the server is busy or a
# gateway lost the request, not the request wrong.
RETRIED_STATUSES = frozenset({429, 502, 503, 504})


class ApiError(Exception):
    """An error answer of the API: its status, and the problem document's fields."""

    def __init__(self, status: int, detail: str, *, title: str = "", field: str | None = None,
                 retry_after: float | None = None) -> None:
        where = f" ({field})" if field else ""
        super().__init__(f"{status} {title}: {detail}{where}" if title else
                         f"{status}: {detail}{where}")
        self.status = status
        self.title = title
        self.detail = detail
        self.field = field
        self.retry_after = retry_after


class BearerAuth(httpx.Auth):
    """`Authorization: Bearer TOKEN` on every request (a `serve` token)."""

    def __init__(self, token: str) -> None:
        self._header = f"Bearer {token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self._header
        yield request


class SigV4Auth(httpx.Auth):
    """AWS Signature Version 4 for an API Gateway stage (service `execute-api`).

    `credentials` are botocore's (a session's `get_credentials()`); by default
    the standard chain's (environment, profile, instance role), read once and
    refreshed by botocore when they are temporary."""

    requires_request_body = True

    def __init__(self, region: str, *, credentials: Any = None,
                 service: str = "execute-api") -> None:
        import botocore.session  # noqa: PLC0415  # only a client of API Gateway needs it

        self.region = region
        self.service = service
        found = credentials or botocore.session.get_session().get_credentials()
        if found is None:
            raise ValueError("no AWS credentials found to sign requests with (environment, "
                             "profile or role)")
        self._credentials: Any = found

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        from botocore.auth import SigV4Auth as Signer  # noqa: PLC0415
        from botocore.awsrequest import AWSRequest  # noqa: PLC0415

        # Sign what will be sent: the method, the URL as encoded, the body's bytes,
        # and the headers botocore signs (host, and the date it adds).
        unsigned = AWSRequest(method=request.method, url=str(request.url),
                              data=request.content,
                              headers={"Host": request.url.netloc.decode("ascii"),
                                       **({"Content-Type": request.headers["Content-Type"]}
                                          if "Content-Type" in request.headers else {})})
        Signer(self._credentials.get_frozen_credentials(), self.service,
               self.region).add_auth(unsigned)
        for name, value in unsigned.headers.items():
            request.headers[name] = value
        yield request


class AgentRuntimeClient:
    """The routes of the API (docs/openapi.json) as methods. Thread-safe as httpx's client is."""

    def __init__(self, base_url: str, *, token: str | None = None,
                 auth: httpx.Auth | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if token is not None and auth is not None:
            raise ValueError("give token or auth, not both")
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout,
                                  auth=BearerAuth(token) if token is not None else auth,
                                  transport=transport, trust_env=False,
                                  headers={"Accept": "application/json"})
        self._sleep = sleep
        self._clock = clock

    # -- runs ------------------------------------------------------------------

    def create_run(self, manifest: Mapping[str, Any] | str, *,
                   variables: Mapping[str, Any] | None = None, model: str | None = None,
                   max_total_tokens: int | None = None,
                   idempotency_key: str | None = None) -> RunView:
        """Start a run of `manifest` (an agent manifest as an object, or its YAML/JSON
        text). With `idempotency_key`, a repeat of the same request answers the same run."""
        body: dict[str, Any] = {"manifest": manifest if isinstance(manifest, str)
                                else dict(manifest)}
        if variables is not None:
            body["variables"] = dict(variables)
        if model is not None:
            body["options"] = {"model": model}
        if max_total_tokens is not None:
            body["budget"] = {"maxTotalTokens": max_total_tokens}
        headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        return self._call("POST", "/runs", RunEnvelope, json_body=body, headers=headers).run

    def get_run(self, run_id: str) -> RunView:
        return self._call("GET", f"/runs/{_segment(run_id)}", RunEnvelope).run

    def list_runs(self, *, status: RunStatus | str | None = None, parent: str | None = None,
                  page_size: int = 50) -> Iterator[RunView]:
        """The caller's runs, newest first, page by page as they are read."""
        params: dict[str, Any] = {"limit": page_size}
        if status is not None:
            params["status"] = RunStatus(status).value
        if parent is not None:
            params["parent"] = parent
        while True:
            page = self._call("GET", "/runs", RunList, params=params)
            yield from page.runs
            if page.cursor is None:
                return
            params["cursor"] = page.cursor

    def wait(self, run_id: str, *, past: RunView | None = None, timeout: float | None = None,
             interval: float = 0.5) -> RunView:
        """Poll until the run is no longer under way (completed, failed, cancelled or
        suspended); with `past` (what an action answered, e.g. `approve`), until it has
        also moved on from it: a later attempt, or another status. `TimeoutError` after
        `timeout` seconds."""
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            run = self.get_run(run_id)
            if run.status not in UNDER_WAY and (
                    past is None or run.attempt > past.attempt or run.status is not past.status):
                return run
            if deadline is not None and self._clock() >= deadline:
                raise TimeoutError(f"run {run_id} is still {run.status.value} after "
                                   f"{timeout:g} s")
            self._sleep(interval)

    def output(self, run_id: str) -> Any:
        """The run's output (None until it completes), however large: an output the
        server answers in parts is read part by part and put back together."""
        answer = self._call("GET", f"/runs/{_segment(run_id)}/output", RunOutput)
        if answer.next is None and answer.data is None:
            return answer.output
        text = bytearray()
        while True:
            if answer.data is not None:
                text += base64.b64decode(answer.data, validate=True)
            if answer.next is None:
                return json.loads(text.decode("utf-8"))
            answer = self._call("GET", answer.next, RunOutput)

    def checkpoints(self, run_id: str, *, page_size: int = 50) -> Iterator[CheckpointSummary]:
        """The run's step timeline, oldest first."""
        params: dict[str, Any] = {"limit": page_size}
        while True:
            page = self._call("GET", f"/runs/{_segment(run_id)}/checkpoints", CheckpointList,
                              params=params)
            yield from page.checkpoints
            if page.cursor is None:
                return
            params["cursor"] = page.cursor

    def checkpoint(self, run_id: str, seq: int) -> CheckpointState:
        return self._call("GET", f"/runs/{_segment(run_id)}/checkpoints/{int(seq)}",
                          CheckpointEnvelope).checkpoint

    def events(self, run_id: str, *, after: int = 0, follow: bool = False, wait: int = 20,
               page_size: int = 100, pause: float = 1.0) -> Iterator[EventView]:
        """The run's events after cursor `after`, oldest first, each once.

        Without `follow`, what the log holds now. With it, also what the run commits
        later: each request long-polls up to `wait` seconds, the next one continues
        from the last cursor yielded, until the run has ended and its log was read
        whole. A request that fails on the way (the connection, or 429, 502-504) is
        asked again after `pause` seconds (or the server's Retry-After)."""
        path = f"/runs/{_segment(run_id)}/events"
        while True:
            params = {"after": after, "limit": page_size, "wait": wait if follow else 0}
            try:
                page = self._call("GET", path, EventPage, params=params,
                                  timeout=self._waiting(wait if follow else 0))
            except httpx.TransportError:
                if not follow:
                    raise
                self._sleep(pause)
                continue
            except ApiError as error:
                if not follow or error.status not in RETRIED_STATUSES:
                    raise
                self._sleep(error.retry_after or pause)
                continue
            yield from page.events
            after = page.cursor
            if not page.events and (not follow or page.status.terminal):
                return

    def _waiting(self, wait: float) -> httpx.Timeout:
        """The client's timeouts, its read timeout lengthened by a long-poll's wait."""
        read = self._http.timeout.read
        return httpx.Timeout(self._http.timeout.connect, read=None if read is None
                             else read + wait, write=self._http.timeout.write,
                             pool=self._http.timeout.pool)

    def effects(self, run_id: str) -> list[EffectView]:
        return self._call("GET", f"/runs/{_segment(run_id)}/effects", EffectList).effects

    # -- actions -----------------------------------------------------------------

    def approve(self, run_id: str, approval_id: str, *, approved: bool = True,
                response: Any = None) -> RunView:
        """Answer the approval the run waits on (`approved=False` rejects it)."""
        return self._call("POST", f"/runs/{_segment(run_id)}/approvals/{_segment(approval_id)}",
                          RunEnvelope, json_body={"approved": approved, "response": response}
                          ).run

    def resume(self, run_id: str, *, max_total_tokens: int | None = None) -> RunView:
        body = {} if max_total_tokens is None else {"maxTotalTokens": max_total_tokens}
        return self._call("POST", f"/runs/{_segment(run_id)}/resume", RunEnvelope,
                          json_body=body).run

    def cancel(self, run_id: str) -> RunView:
        return self._call("POST", f"/runs/{_segment(run_id)}/cancel", RunEnvelope).run

    def fork(self, run_id: str, *, seq: int | None = None) -> RunView:
        """A new run from a checkpoint of this one (default: its latest)."""
        body = {} if seq is None else {"seq": seq}
        return self._call("POST", f"/runs/{_segment(run_id)}/fork", RunEnvelope,
                          json_body=body).run

    def settle_effect(self, run_id: str, key: str, action: str, *,
                      result: Any = None) -> RunView:
        """Settle a tool call whose outcome is unknown: `retry`, `result` or `skip`."""
        return self._call("POST", f"/runs/{_segment(run_id)}/effects/{_segment(key)}",
                          RunEnvelope, json_body={"action": action, "result": result}).run

    def whoami(self) -> str:
        """The tenant the credentials name."""
        return self._call("GET", "/whoami", Caller).tenant

    # -- the connection -----------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AgentRuntimeClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def _call(self, method: str, path: str, model: type[M], *,
              json_body: Any = None, params: Mapping[str, Any] | None = None,
              headers: Mapping[str, str] | None = None,
              timeout: httpx.Timeout | None = None) -> M:
        content = None if json_body is None else json.dumps(
            json_body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        sent = dict(headers or {})
        if content is not None:
            sent["Content-Type"] = "application/json"
        answer = self._http.request(method, path, content=content, params=params,
                                    headers=sent, timeout=timeout or self._http.timeout)
        if answer.status_code >= 400:
            raise _error(answer)
        return model.model_validate_json(answer.content)


def _segment(value: str) -> str:
    """A path segment as sent: run ids, approval ids and effect keys as the API takes
    them; anything else is refused here rather than sent to another path."""
    if not _SEGMENT.fullmatch(value):
        raise ValueError(f"{value!r} is not a run id, approval id or effect key")
    return value


def _error(answer: httpx.Response) -> ApiError:
    retry = answer.headers.get("Retry-After")
    retry_after = float(retry) if retry is not None and retry.isdigit() else None
    try:
        problem = answer.json()
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        return ApiError(answer.status_code, answer.reason_phrase or "error",
                        retry_after=retry_after)
    field = problem.get("field")
    return ApiError(answer.status_code, str(problem.get("detail", "")),
                    title=str(problem.get("title", "")),
                    field=field if isinstance(field, str) else None, retry_after=retry_after)


__all__ = ["AgentRuntimeClient", "ApiError", "BearerAuth", "SigV4Auth"]
