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
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from agent_runtime.api.services import Unauthenticated

TENANT_CLAIM = "AGENT_RUNTIME_TENANT_CLAIM"
DEFAULT_TENANT_CLAIM = "sub"

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

    def __init__(self, *, tenant_claim: str = DEFAULT_TENANT_CLAIM) -> None:
        self.tenant_claim = tenant_claim or DEFAULT_TENANT_CLAIM

    @classmethod
    def from_environment(cls) -> HttpApiAuthenticator:
        return cls(tenant_claim=os.environ.get(TENANT_CLAIM, ""))

    def tenant(self, event: BaseProxyEvent) -> str:
        authorizer = _mapping(_mapping(event.get("requestContext")).get("authorizer"))
        jwt = _mapping(authorizer.get("jwt"))
        if jwt:
            claim = _mapping(jwt.get("claims")).get(self.tenant_claim)
            if claim is None or not str(claim):
                raise Unauthenticated(f"the token has no {self.tenant_claim!r} claim")
            return str(claim)
        user_arn = _mapping(authorizer.get("iam")).get("userArn")
        if isinstance(user_arn, str) and user_arn:
            return principal_tenant(user_arn)
        raise Unauthenticated("the request carries no identity verified by API Gateway")


def _mapping(value: Any) -> Mapping[str, Any]:
    # API Gateway sends null for some absent parts (e.g. `cognitoIdentity`).
    return value if isinstance(value, Mapping) else {}
