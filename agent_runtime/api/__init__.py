"""The HTTP API: one set of routes, served by API Gateway on AWS and by `agent-runtime serve`.

    resolver = OneHopResolver(enable_validation=True)   # APIGatewayHttpResolver on AWS
    build_api(resolver, ApiServices(store=..., runtime=..., launcher=..., authenticator=...))

Names are imported when first used: a module of the package that needs none
of them (the wire models the Python client reads, `agent_runtime.client`)
does not load the routes and the web framework behind them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_runtime.api.routes import build_api
    from agent_runtime.api.services import (
        ApiLimits,
        ApiServices,
        Authenticator,
        Launcher,
        Unauthenticated,
    )

_HOMES = {"build_api": "agent_runtime.api.routes", "ApiLimits": "agent_runtime.api.services",
          "ApiServices": "agent_runtime.api.services",
          "Authenticator": "agent_runtime.api.services",
          "Launcher": "agent_runtime.api.services",
          "Unauthenticated": "agent_runtime.api.services"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the routes (deterministic; see `agent_runtime.api.openapi`)."""
    from agent_runtime.api.openapi import openapi_document as document  # noqa: PLC0415

    return document()


__all__ = ["ApiLimits", "ApiServices", "Authenticator", "Launcher", "Unauthenticated",
           "build_api", "openapi_document"]
