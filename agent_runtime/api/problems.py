"""Every error of the HTTP API, as `application/problem+json` (RFC 9457), mapped in one place.

A problem is `{type, title, status, detail, field?}`; `field` names the
offending field when there is one. The mapping:

* 400 a body that is not JSON (or not UTF-8, holds a lone surrogate, or is
  nested absurdly deep);
* 401 no acceptable credentials; 403 credentials without the route's scope
  (a JWT on AWS, functions/api/authenticator.py);
* 404 no such run, or a run of another tenant (its existence is not
  disclosed), or a URL naming no resource;
* 405 a known path with a method it does not take;
* 409 the run's state does not allow it (a lease held, a run already
  terminal, an answer already given, an idempotency key reused);
* 413 a body over `ApiLimits.max_body_bytes`; 415 a body that is not JSON by
  its content type;
* 422 a request that is JSON but wrong: a field of the wrong type, or a
  manifest, variable or option the engine refuses. A manifest's `detail` is
  exactly what `agent-runtime validate` prints for it;
* 500 only for a damaged store record (`CorruptRecord`), and 503 when the
  store cannot be used at all (`StoreUnavailable`); both are logged and not
  described: nothing a client sends produces a 5xx.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver
from aws_lambda_powertools.event_handler.exceptions import NotFoundError, ServiceError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from pydantic import BaseModel, Field
from stores import (
    CONFLICT_ERRORS,
    CorruptRecord,
    LeaseHeld,
    RunNotFound,
    StaleAttempt,
    StoreError,
    StoreUnavailable,
)

from agent_runtime.api.services import Unauthenticated
from agent_runtime.errors import InvalidInput

PROBLEM_JSON = "application/problem+json"
PROBLEM_TYPE = "urn:agent-runtime:problem:"

logger = logging.getLogger("agent_runtime.api")

_SLUGS = {400: "bad-request", 401: "unauthenticated", 403: "forbidden", 404: "not-found",
          405: "method-not-allowed", 409: "conflict", 413: "too-large",
          415: "unsupported-media-type", 421: "misdirected-request", 422: "invalid-input",
          429: "too-many-requests",
          500: "internal-error", 503: "store-unavailable"}
# Headers documented under their HTTP spelling; powertools reports them lowercased.
_HEADER_NAMES = {"idempotency-key": "Idempotency-Key"}
# Parts of a pydantic error location that name a union member, not a field.
_TYPE_TAGS = frozenset({"str", "int", "bool", "float", "dict", "list", "none"})


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    type: str = Field(description="A URI naming the kind of problem")
    title: str
    status: int
    detail: str = Field(description="What went wrong, for people")
    field: str | None = Field(default=None, description="The offending field, when there is one: "
                              "a request field (`budget.maxTotalTokens`), a parameter, or a "
                              "field of the manifest (`steps[0].type`)")


class ApiProblem(Exception):
    """Raised by a route to answer with a problem."""

    def __init__(self, status: int, detail: str, *, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field
        self.headers = headers or {}


# A detail or field longer than this quotes too much of what the client sent.
MAX_DETAIL = 2000
MAX_FIELD = 200


def excerpt(text: str, limit: int = 60) -> str:
    """User input quoted in a detail: short, one line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def bounded(text: str, limit: int) -> str:
    """`text` unchanged unless it is longer than `limit` (a huge key or id in it)."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def encodable(text: str) -> str:
    """`text` with any lone surrogate written as its escape (`\\ud800`): a problem
    quotes what a client sent, and JSON encoding fails on a lone surrogate."""
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


def problem_response(status: int, detail: str, *, field: str | None = None,
                     headers: dict[str, str] | None = None) -> Response[str]:
    body = Problem(type=PROBLEM_TYPE + _SLUGS.get(status, "error"),
                   title=HTTPStatus(status).phrase, status=status,
                   detail=encodable(bounded(detail, MAX_DETAIL)),
                   field=None if field is None else encodable(bounded(field, MAX_FIELD)))
    return Response(status_code=status, content_type=PROBLEM_JSON, headers=headers,
                    body=body.model_dump_json(exclude_none=True))


def _field_path(loc: Sequence[Any]) -> str | None:
    """A pydantic location as the request spells it: `budget.maxTotalTokens`, `variables[0]`."""
    where, *parts = loc if loc else ("body",)
    if where == "header" and parts:
        return _HEADER_NAMES.get(str(parts[0]).lower(), str(parts[0]))
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in str(part) or "-" in str(part) or str(part) in _TYPE_TAGS:
            continue  # a union member's tag, e.g. `dict[str,any]`
        else:
            out += f".{part}" if out else str(part)
    return out or None


def validation_problem(error: RequestValidationError) -> Response[str]:
    errors = list(error.errors())
    if not errors:
        return problem_response(422, "the request is invalid")
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    kind = str(first.get("type", ""))
    if kind == "json_invalid":
        return problem_response(400, "the body is not JSON")
    field = _field_path(loc)
    reason = str(first.get("msg") or kind)
    if kind == "missing":
        reason = "required" if field else "a JSON body is required"
    elif kind == "extra_forbidden":
        reason = "unknown field"
    detail = f"{field}: {reason}" if field else reason
    others = {_field_path(tuple(item.get("loc", ()))) for item in errors[1:]} - {field}
    if others:
        detail += f" (and {len(others)} more)"
    if loc and loc[0] == "path":
        # A malformed id names no resource.
        return problem_response(404, f"no such resource ({detail})", field=field)
    return problem_response(422, detail, field=field)


def _conflict(error: StoreError) -> Response[str]:
    if isinstance(error, LeaseHeld):
        # The holder (host and pid) is the server's business, not the client's.
        detail = ("the run is being executed right now; try again once it suspends or "
                  "finishes")
    elif isinstance(error, StaleAttempt):
        detail = "the run moved on while this request was handled; reload it and try again"
    else:
        detail = excerpt(str(error), 300)
    return problem_response(409, detail)


def register_problem_handlers(resolver: ApiGatewayResolver,
                              allowed_methods: Callable[[str], list[str]]) -> None:
    """Install the one error mapping on `resolver`. `allowed_methods(path)` lists the
    methods a path takes (empty for an unknown path): 405 versus 404."""

    def _api_problem(error: ApiProblem) -> Response[str]:
        return problem_response(error.status, error.detail, field=error.field,
                                headers=error.headers)

    def _invalid_input(error: InvalidInput) -> Response[str]:
        return problem_response(422, error.render(), field=error.field)

    def _request_validation(error: RequestValidationError) -> Response[str]:
        return validation_problem(error)

    def _unsupported(error: RequestUnsupportedContentType) -> Response[str]:
        return problem_response(415, "send the body as application/json")

    def _unauthenticated(error: Unauthenticated) -> Response[str]:
        return problem_response(401, str(error) or "credentials are required",
                                headers={"WWW-Authenticate": "Bearer"})

    def _run_not_found(error: RunNotFound) -> Response[str]:
        return problem_response(404, "no such run")

    def _store_conflict(error: StoreError) -> Response[str]:
        return _conflict(error)

    def _corrupt(error: CorruptRecord) -> Response[str]:
        logger.error("a store record is damaged: %s", error, exc_info=error)
        return problem_response(500, "the server's run store holds a damaged record; the "
                                     "operator has been told")

    def _unavailable(error: StoreUnavailable) -> Response[str]:
        # The operator's problem (a path, permissions, a lock), not the client's.
        logger.error("the run store is unavailable: %s", error, exc_info=error)
        return problem_response(503, "the server's run store is unavailable; try again later")

    def _not_found(error: NotFoundError) -> Response[str]:
        event = resolver.current_event
        methods = allowed_methods(event.path)
        if methods and event.http_method.upper() not in methods:
            return problem_response(
                405, f"{event.http_method.upper()} is not allowed here; use "
                     f"{', '.join(methods)}", headers={"Allow": ", ".join(methods)})
        return problem_response(404, "no such resource")

    def _service_error(error: ServiceError) -> Response[str]:
        status = error.status_code if error.status_code in _SLUGS else 400
        return problem_response(status, excerpt(str(error.msg), 200))

    def _unexpected(error: Exception) -> Response[str]:
        # A bug, not the client's doing: logged in full, answered without internals.
        logger.error("unhandled error in the HTTP API", exc_info=error)
        return problem_response(500, "the server failed to handle this request")

    handlers: list[tuple[Any, Callable[..., Response[str]]]] = [
        (ApiProblem, _api_problem),
        (InvalidInput, _invalid_input),
        (RequestValidationError, _request_validation),
        (RequestUnsupportedContentType, _unsupported),
        (Unauthenticated, _unauthenticated),
        (RunNotFound, _run_not_found),
        (list(CONFLICT_ERRORS), _store_conflict),
        (CorruptRecord, _corrupt),
        (StoreUnavailable, _unavailable),
        (NotFoundError, _not_found),
        (ServiceError, _service_error),
        (Exception, _unexpected),
    ]
    for exceptions, handler in handlers:
        resolver.exception_handler(exceptions)(handler)


def problem_schema_responses(*statuses: int) -> dict[int, Any]:
    """OpenAPI responses for these problem statuses."""
    return {status: {"description": HTTPStatus(status).phrase,
                     "content": {PROBLEM_JSON: {"model": Problem}}} for status in statuses}
