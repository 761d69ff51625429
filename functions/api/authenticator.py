"""Who calls the HTTP API on AWS: the identity API Gateway's authorizer verified.

API Gateway authenticates every route before the function runs (template.yaml:
IAM, or a JWT authorizer when `JwtIssuer` is set) and puts what it verified in
the event's `requestContext.authorizer`; the client cannot set that part. The
tenant is read from it:

* IAM (SigV4): the caller's principal, `authorizer.iam.userArn`. An
  assumed-role session (`arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION`) is
  its role, `arn:aws:iam::ACCOUNT:role/ROLE`: session names change with every
  assumption (a CLI profile, a Lambda function's invocation, a CI job), and
  the role is what the client policy is attached to, so every session of a
  role sees the same runs. (The role's path is not in a session's ARN, so a
  role created under a path is named without it.) Users, federated users and
  the account root keep their ARN.
* JWT: the claim named by `AGENT_RUNTIME_TENANT_CLAIM` (template.yaml's
  `TenantClaim`; `sub` when empty), as a string.

A request with neither, or with an empty principal or claim, is
`Unauthenticated` (401).

A JWT caller also needs the route's scope (template.yaml's `ApiReadScope` for
the routes that only read, GET; `ApiWriteScope` for those that change runs,
POST; empty: not checked), among the token's scopes: the `scope` claim
(space-separated, as OAuth 2.0 and Cognito access tokens carry them), the
`scp` claim (a list, as some issuers send it; API Gateway renders a list claim
as `[a b]`) or the authorizer's `scopes`. API Gateway checks the same scopes
per route (the routes' `security` in template.yaml); this check is what holds
when a route is added without them. A missing scope is 403 problem+json
naming the route and the scope, never the token. IAM callers are authorised
by their IAM policy (execute-api:Invoke), not by scopes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from agent_runtime.api.problems import ApiProblem
from agent_runtime.api.services import Unauthenticated

TENANT_CLAIM = "AGENT_RUNTIME_TENANT_CLAIM"
DEFAULT_TENANT_CLAIM = "sub"
READ_SCOPE = "AGENT_RUNTIME_READ_SCOPE"
WRITE_SCOPE = "AGENT_RUNTIME_WRITE_SCOPE"
# Methods that only read; every other one changes runs (or asks to).
READING_METHODS = frozenset({"GET", "HEAD"})
_SCOPE_SEPARATORS = re.compile(r"[\s,]+")

_ASSUMED_ROLE = re.compile(
    r"arn:(?P<partition>[\w-]+):sts::(?P<account>\d{12}):assumed-role/(?P<role>[^/]+)/[^/]+")


def principal_tenant(user_arn: str) -> str:
    """The tenant of an IAM principal: an assumed-role session's role, else the ARN itself."""
    session = _ASSUMED_ROLE.fullmatch(user_arn)
    if session is None:
        return user_arn
    return f"arn:{session['partition']}:iam::{session['account']}:role/{session['role']}"


class HttpApiAuthenticator:
    """The `Authenticator` of an API Gateway HTTP API (payload format 2.0)."""

    def __init__(self, *, tenant_claim: str = DEFAULT_TENANT_CLAIM, read_scope: str = "",
                 write_scope: str = "") -> None:
        self.tenant_claim = tenant_claim or DEFAULT_TENANT_CLAIM
        self.read_scope = read_scope.strip()
        self.write_scope = write_scope.strip()

    @classmethod
    def from_environment(cls) -> HttpApiAuthenticator:
        return cls(tenant_claim=os.environ.get(TENANT_CLAIM, ""),
                   read_scope=os.environ.get(READ_SCOPE, ""),
                   write_scope=os.environ.get(WRITE_SCOPE, ""))

    def tenant(self, event: BaseProxyEvent) -> str:
        authorizer = _mapping(_mapping(event.get("requestContext")).get("authorizer"))
        jwt = _mapping(authorizer.get("jwt"))
        if jwt:
            claim = _mapping(jwt.get("claims")).get(self.tenant_claim)
            if claim is None or not str(claim):
                raise Unauthenticated(f"the token has no {self.tenant_claim!r} claim")
            self._check_scope(event, jwt)
            return str(claim)
        user_arn = _mapping(authorizer.get("iam")).get("userArn")
        if isinstance(user_arn, str) and user_arn:
            return principal_tenant(user_arn)
        raise Unauthenticated("the request carries no identity verified by API Gateway")

    def _check_scope(self, event: BaseProxyEvent, jwt: Mapping[str, Any]) -> None:
        http = _mapping(_mapping(event.get("requestContext")).get("http"))
        method = str(http.get("method") or event.get("httpMethod") or "").upper()
        needed = self.read_scope if method in READING_METHODS else self.write_scope
        if not needed or needed in token_scopes(jwt):
            return
        route = event.get("routeKey") or f"{method} {http.get('path') or ''}".strip()
        raise ApiProblem(403, f"{route} needs the scope {needed!r}, which the token does "
                              "not grant")


def token_scopes(jwt: Mapping[str, Any]) -> set[str]:
    """The scopes a verified token grants: its `scope` and `scp` claims and the
    authorizer's `scopes`, whichever it carries."""
    claims = _mapping(jwt.get("claims"))
    found: set[str] = set()
    for value in (claims.get("scope"), claims.get("scp"), jwt.get("scopes")):
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, str):
                # `a b`, or a list claim as API Gateway renders it: `[a b]`.
                found.update(part for part in _SCOPE_SEPARATORS.split(item.strip("[]")) if part)
    return found


def _mapping(value: Any) -> Mapping[str, Any]:
    # API Gateway sends null for some absent parts (e.g. `cognitoIdentity`).
    return value if isinstance(value, Mapping) else {}
