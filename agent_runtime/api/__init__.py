"""The HTTP API: one set of routes, served by API Gateway on AWS and by `agent-runtime serve`.

    resolver = HttpResolverLocal(enable_validation=True)   # APIGatewayHttpResolver on AWS
    build_api(resolver, ApiServices(store=..., runtime=..., launcher=..., authenticator=...))
"""

from __future__ import annotations

from typing import Any

from agent_runtime.api.routes import build_api
from agent_runtime.api.services import (
    ApiLimits,
    ApiServices,
    Authenticator,
    Launcher,
    Unauthenticated,
)


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the routes (deterministic; see `agent_runtime.api.openapi`)."""
    from agent_runtime.api.openapi import openapi_document as document  # noqa: PLC0415

    return document()


__all__ = ["ApiLimits", "ApiServices", "Authenticator", "Launcher", "Unauthenticated",
           "build_api", "openapi_document"]
