"""What happens to a request before Powertools validates it: who calls, and the body's bytes.

Powertools' request validation is the first middleware of every route; it
parses the JSON body itself. `RequestGuard` replaces it on the resolver with
a subclass that first authenticates the caller (401 before anything else is
said), then refuses a body over the size limit before reading it (413), a
body declared as anything but JSON (415), one that is not UTF-8 or not JSON
(400: duplicate keys and NaN are refused, as in manifests), one nested
deeper than any request needs (400) or one holding a lone surrogate (400:
`"\\ud800"` is valid JSON syntax but not Unicode text, and no store, log or
answer can encode it), and hands the parsed value to the validation it then
runs unchanged. Every string a body carries (keys, an approval's `response`,
an effect's `result`, variables, manifest text) passes this one check, so no
route meets a lone surrogate later as a serialization error (a 500).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler.middlewares.openapi_validation import (
    OpenAPIRequestValidationMiddleware,
)

from agent_runtime.api.problems import ApiProblem
from agent_runtime.document_paths import PathPart, format_path, unique_pairs

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver
    from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
    from aws_lambda_powertools.event_handler.types import EventHandlerInstance
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from agent_runtime.api.services import ApiServices

# Deeper than any request needs: a manifest may nest 128 levels (the
# manifest's own limit, checked with a better message) inside the body.
MAX_BODY_DEPTH = 160
TENANT = "agent_runtime.tenant"


class RequestGuard(OpenAPIRequestValidationMiddleware):
    def __init__(self, services: Callable[[], ApiServices], protected: Collection[Any]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._services = services
        self._protected = protected

    def handler(self, app: EventHandlerInstance, next_middleware: NextMiddleware) -> Any:
        route = app.context.get("_route")
        if route is not None and route.func in self._protected:
            services = self._services()
            event = app.current_event
            app.context[TENANT] = services.authenticator.tenant(event)
            text = _body_text(event, services.limits.max_body_bytes)
            if route.dependant.body_params:
                if not _is_json(event):  # forms and multipart are not this API's
                    raise ApiProblem(415, "send the body as application/json")
                if text is not None:
                    _cache_json(event, text)
        return super().handler(app, next_middleware)


def install(resolver: ApiGatewayResolver, guard: RequestGuard) -> None:
    """Make `guard` the resolver's request validation (Powertools 3.x builds every
    route's chain from `_request_validation_middleware`)."""
    current = getattr(resolver, "_request_validation_middleware", None)
    if current is not None and not isinstance(current, OpenAPIRequestValidationMiddleware):
        raise TypeError("this aws-lambda-powertools builds request validation differently; "
                        "agent_runtime.api.guard needs updating")
    resolver._request_validation_middleware = guard


def _is_json(event: BaseProxyEvent) -> bool:
    # As Powertools decides: no content type, or application/json[; ...].
    content_type = event.headers.get("content-type", "").strip()
    return not content_type or content_type.startswith("application/json")


def _body_text(event: BaseProxyEvent, limit: int) -> str | None:
    raw = event.body
    if not raw:
        return None
    too_large = ApiProblem(413, f"the body is larger than {limit:,} bytes")
    if event.is_base64_encoded:
        if len(raw) > (limit + 2) // 3 * 4:
            raise too_large
        try:
            data = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise ApiProblem(400, "the body is not valid base64") from None
    else:
        if len(raw) > limit:  # characters: at most as many as bytes
            raise too_large
        data = raw.encode("utf-8", "surrogatepass")
    if len(data) > limit:
        raise too_large
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiProblem(400, f"the body is not UTF-8 text (byte {error.start})") from None
    if event.is_base64_encoded:
        event.__dict__["decoded_body"] = text  # Powertools' cached property
    return text


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _cache_json(event: BaseProxyEvent, text: str) -> None:
    try:
        value = json.loads(text, object_pairs_hook=unique_pairs, parse_constant=_no_constant)
    except RecursionError:
        raise ApiProblem(400, f"the body is nested deeper than {MAX_BODY_DEPTH} levels") \
            from None
    except json.JSONDecodeError as error:
        raise ApiProblem(400, f"the body is not JSON: {error.msg} at line {error.lineno}, "
                              f"column {error.colno}") from None
    except ValueError as error:
        raise ApiProblem(400, f"the body is not JSON: {error}") from None
    _check_structure(value)
    if not isinstance(value, dict):
        # Every body of this API is an object; Powertools would read a list's first item.
        raise ApiProblem(422, "the body must be a JSON object")
    event.__dict__["json_body"] = value  # Powertools' cached property: parsed once, here


_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_in(text: str) -> str | None:
    """The first lone surrogate of `text`, as JSON spells it (`\\ud800`), or None."""
    if text.isascii():
        return None
    found = _SURROGATE.search(text)
    return None if found is None else f"\\u{ord(found[0]):04x}"


def _check_structure(value: Any) -> None:
    """400 for a body nested deeper than `MAX_BODY_DEPTH`, or holding a lone surrogate
    in a key or a string (named by its JSON path, `response.note`, never quoted)."""
    stack: list[tuple[Any, tuple[PathPart, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if len(path) > MAX_BODY_DEPTH:
            raise ApiProblem(400, f"the body is nested deeper than {MAX_BODY_DEPTH} levels")
        if isinstance(item, str):
            found = _surrogate_in(item)
            if found is not None:
                _refuse_surrogate(found, path, key=False)
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):
                found = _surrogate_in(key)
                if found is not None:
                    _refuse_surrogate(found, path, key=True)
                stack.append((child, (*path, key)))
        elif isinstance(item, list):
            stack.extend((child, (*path, index)) for index, child in reversed(
                list(enumerate(item))))


def _refuse_surrogate(found: str, path: tuple[PathPart, ...], *, key: bool) -> None:
    field = format_path(path) or None
    if key:
        place = "a top-level key" if field is None else f"a key of {field}"
    else:
        place = field or "the body"
    raise ApiProblem(400, f"{place} contains a lone surrogate ({found}), which is not "
                          "Unicode text", field=field)
