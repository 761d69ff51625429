"""`serve`'s resolver: each request answered on one worker thread, in one hop.

Powertools' ASGI resolver (`HttpResolverLocal`) answers a request on the event
loop, and runs each synchronous middleware on a worker thread of its own,
that thread blocking until the next one, run on yet another thread, has
answered: our guard, then Powertools' request and response validation, then
the route. Each hop hands the request to another thread (~150-200 us of the
interpreter here), and a request holds several threads at once.

Our middlewares and routes are all synchronous: store reads, and commits that
may wait for an fsync. So `OneHopResolver` runs the synchronous resolution
Lambda uses (`ApiGatewayResolver._resolve`: the middlewares, the route and the
exception handlers, in that order) on one worker thread, and the event loop
only awaits it. The request's state is in the resolver's context variable,
which `asyncio.to_thread` carries to that thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aws_lambda_powertools.event_handler.http_resolver import HttpResolverLocal


class OneHopResolver(HttpResolverLocal):
    """An `HttpResolverLocal` that answers each request on one worker thread (the
    event loop's default executor); its routes and middlewares must be synchronous."""

    async def _resolve_async(self) -> dict[str, Any]:  # type: ignore[override]
        return await asyncio.to_thread(self._answer)

    def _answer(self) -> dict[str, Any]:
        answer: dict[str, Any] = self._resolve().build(self.current_event, self._cors)
        return answer
