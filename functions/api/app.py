"""The HTTP API on AWS: API Gateway (HTTP API, payload format 2.0) -> the routes.

The routes are agent_runtime.api's, the same ones `agent-runtime serve`
serves (DESIGN section 12). What this function adds is the AWS side of their
seam (`ApiServices`): the container's store and runtime
(functions/environment.py), a launcher that starts and resumes runs through
the state machine (`AwsLauncher`), and the tenant API Gateway's authorizer
verified (`HttpApiAuthenticator`). They are built once per container, on the
first request.

Logs carry the route and the status, never a request or response body.
Metrics: one count per response class (`Api2xx`, `Api4xx`, `Api5xx`).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from agent_runtime.api import ApiServices, build_api
from functions import environment
from functions.api.authenticator import HttpApiAuthenticator
from functions.api.launcher import AwsLauncher
from functions.telemetry import LogEventSink, count, logger

# The resolver of this container, with the services it was built on: built
# again only when `environment.services()` changes (tests replace it).
_built: list[tuple[environment.Services, APIGatewayHttpResolver]] = []


def build_resolver(services: environment.Services) -> APIGatewayHttpResolver:
    resolver = APIGatewayHttpResolver(enable_validation=True)
    launcher = AwsLauncher(services.store, services.events, bus=services.settings.event_bus,
                           clock=services.clock)
    build_api(resolver, ApiServices(store=services.store,
                                    runtime=services.runtime([LogEventSink()]),
                                    launcher=launcher,
                                    authenticator=HttpApiAuthenticator.from_environment()))
    return resolver


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
