"""The HTTP API on AWS: API Gateway (HTTP API, payload format 2.0) -> the routes.

The routes are agent_runtime.api's, the same ones `agent-runtime serve`
serves (docs/design.md section 12). What this function adds is the AWS side of their
seam (`ApiServices`): the container's store and runtime
(functions/environment.py), a launcher that starts and resumes runs through
the state machine (`AwsLauncher`), and the tenant API Gateway's authorizer
verified (`HttpApiAuthenticator`), each tenant's requests counted against its
per-minute limit (`TenantRequestLimit`). They are built once per container,
on the first request; the runtime on the first request that needs one (a request
that only reads runs never loads the engine).

A run a client cancels is announced with a run-finished event.

Logs carry the route and the status, never a request or response body.
Metrics: one count per response class (`Api2xx`, `Api4xx`, `Api5xx`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from agent_runtime.api import ApiServices, build_api
from agent_runtime.api.services import Authenticator
from agent_runtime.startup_heap import freeze_startup_heap
from functions import environment
from functions.api.authenticator import HttpApiAuthenticator
from functions.api.launcher import AwsLauncher
from functions.api.tenant_requests import (
    LimitedAuthenticator,
    TenantRequestLimit,
    requests_per_minute_from_environment,
)
from functions.run_events import announce_record_finished
from functions.telemetry import LogEventSink, count, logger

if TYPE_CHECKING:
    from agent_runtime.engine import AgentRuntime

# The resolver of this container, with the services it was built on: built
# again only when `environment.services()` changes (tests replace it).
_built: list[tuple[environment.Services, APIGatewayHttpResolver]] = []


def build_resolver(services: environment.Services) -> APIGatewayHttpResolver:
    resolver = APIGatewayHttpResolver(enable_validation=True)
    bus = services.settings.event_bus
    launcher = AwsLauncher(services.store, services.events, bus=bus, clock=services.clock)
    build_api(resolver, ApiServices(store=services.store, runtime=functools.partial(
        build_runtime, services), launcher=launcher, authenticator=authenticator(services)))
    return resolver


def build_runtime(services: environment.Services) -> AgentRuntime:
    """The routes' runtime, built when a route first needs one (creating, forking,
    cancelling, answering a run): a container whose requests only read runs never
    loads the engine, its config or its steps."""
    from functions.api.announcing_runtime import AnnouncingRuntime  # noqa: PLC0415

    bus = services.settings.event_bus
    return services.runtime([LogEventSink()], kind=functools.partial(
        AnnouncingRuntime, announce=lambda run_id: announce_record_finished(
            services.events, services.store, run_id, bus=bus)))


def authenticator(services: environment.Services) -> Authenticator:
    verified = HttpApiAuthenticator.from_environment()
    per_minute = requests_per_minute_from_environment()
    if not per_minute:
        return verified
    store = services.store
    return LimitedAuthenticator(verified, TenantRequestLimit(
        store.client, store.table_name, per_minute=per_minute, clock=services.clock))


def resolver() -> APIGatewayHttpResolver:
    services = environment.services()
    if not _built or _built[0][0] is not services:
        _built[:] = [(services, build_resolver(services))]
    return _built[0][1]


@logger.inject_lambda_context(clear_state=True,
                              correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    response = resolver().resolve(event, context)
    status = int(response.get("statusCode", 0))
    count(f"Api{status // 100}xx")
    logger.info("api request", extra={"route": event.get("routeKey"), "status": status})
    return response


# Imported: what this container built while starting lives as long as it does.
freeze_startup_heap()
