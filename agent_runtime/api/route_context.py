"""What every route of the HTTP API stands on: the parameters they share, the
responses they document, the cursors they hand out, and `RouteContext`, which
binds them to the services, the caller's tenant and the caller's runs.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from pydantic import BaseModel
from stores.records import RunRecord

from agent_runtime.api import guard
from agent_runtime.api.problems import ApiProblem, problem_schema_responses
from agent_runtime.api.services import ApiServices, AtCapacity
from agent_runtime.api.tenant_quota import check_quota
from agent_runtime.api.wire import CURSOR_PATTERN, RUN_ID_PATTERN, run_envelope, to_json

JSON = "application/json"
# `limit` may ask for up to this many rows; `ApiLimits.max_page_size` caps what a page holds.
MAX_LIMIT = 1000
# `wait` may ask for up to this many seconds; `ApiLimits.max_events_wait_seconds` caps it.
MAX_WAIT = 60
# Past any output a policy allows (`maxRunOutputBytes` is at most 2**31).
MAX_OUTPUT_OFFSET = 2**31

RunId = Annotated[str, Path(pattern=RUN_ID_PATTERN, description="A run id")]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many rows (the "
                                                             "server may return fewer)")]
Cursor = Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                     description="The `cursor` of the previous page")]


def json_response(status: int, model: BaseModel,
                  headers: dict[str, str] | None = None) -> Response[str]:
    return Response(status_code=status, content_type=JSON, body=to_json(model), headers=headers)


def route_responses(status: int, model: type[BaseModel], description: str, *problems: int,
                    body: bool = False) -> dict[int, Any]:
    """A route's documented responses: its success, and the problems it may answer."""
    common = (400, 401, 403, 404, 413, 422, 500, 503) + ((415,) if body else ())
    return {status: {"description": description, "content": {JSON: {"model": model}}},
            **problem_schema_responses(*sorted({*common, *problems}))}


def encode_cursor(text: str | None) -> str | None:
    return None if text is None else base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    if cursor is None:
        return None
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, ValueError):
        raise ApiProblem(422, "not a cursor this API returned", field="cursor") from None


class RouteContext:
    """What every route uses: the services (None only to describe the routes), the
    router and its table of rules, the caller's tenant and runs."""

    def __init__(self, services: ApiServices | None) -> None:
        self._services = services
        self.router = Router()  # type: ignore[no-untyped-call]
        self.protected: set[Callable[..., Any]] = set()
        self._table: list[tuple[str, re.Pattern[str]]] = []

    @property
    def services(self) -> ApiServices:
        if self._services is None:
            raise RuntimeError("these routes were built only to describe the API")
        return self._services

    def allowed_methods(self, path: str) -> list[str]:
        return sorted({method for method, rule in self._table if rule.fullmatch(path)})

    def _route(self, method: str, rule: str, *, public: bool = False,
               **options: Any) -> Callable[[Any], Any]:
        self._table.append((method, re.compile(re.sub(r"<\w+>", "[^/]+", rule))))

        def register(route: Callable[..., Any]) -> Callable[..., Any]:
            if not public:
                self.protected.add(route)
            return self.router.route(rule, method, enable_validation=True, **options)(route)
        return register

    def tenant(self) -> str:
        tenant = self.router.context.get(guard.TENANT)
        if isinstance(tenant, str):
            return tenant
        return self.services.authenticator.tenant(self.router.current_event)

    def visible_run(self, run_id: str) -> RunRecord:
        """The caller's run; 404 when missing or another tenant's (never said which)."""
        tenant = self.tenant()
        record = None if ".." in run_id else self.services.store.load_run(run_id)
        if record is None or record.tenant != tenant:
            raise ApiProblem(404, "no such run")
        return record

    def run_response(self, status: int, record: RunRecord,
                     headers: dict[str, str] | None = None) -> Response[str]:
        """`{run}`, its output shown only when small (`ApiLimits.max_inline_output_bytes`)."""
        envelope = run_envelope(record,
                                max_output_bytes=self.services.limits.max_inline_output_bytes)
        return json_response(status, envelope, headers)

    @contextlib.contextmanager
    def place_for_a_run(self) -> Iterator[None]:
        """Hold a place for the run the block starts or resumes (`RunCapacity`), or answer
        429 (503 while the server stops) with Retry-After before anything is stored."""
        capacity = self.services.capacity
        if capacity is None:
            yield
            return
        try:
            place = capacity.admit(self.tenant())
        except AtCapacity as full:
            raise ApiProblem(full.status, full.detail,
                             headers={"Retry-After": str(full.retry_after)}) from None
        with place:
            yield

    def reload(self, run_id: str) -> RunRecord:
        record = self.services.store.load_run(run_id)
        if record is None:  # deleted meanwhile (retention)
            raise ApiProblem(404, "no such run")
        return record

    def check_quota(self) -> None:
        """429 when the caller's tenant may not start another run now (tenant_quota)."""
        runtime = self.services.engine()
        check_quota(self.services.store, runtime.policy, self.tenant(), runtime.clock.now())
