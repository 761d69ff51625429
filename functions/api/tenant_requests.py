"""Each tenant's share of the HTTP API on AWS: at most N requests a minute.

API Gateway's throttle (`ApiThrottlingRateLimit`, `ApiThrottlingBurstLimit`)
is one bucket for the whole stage: one tenant sending fast enough takes every
other tenant's requests with it. So the API function also counts each
tenant's requests (template.yaml's `TenantRequestsPerMinute`, in
`AGENT_RUNTIME_TENANT_REQUESTS_PER_MINUTE`; 0 or empty: not counted) and
answers one past the count 429 problem+json, with `Retry-After` the seconds
left in the minute.

The count must hold across every container of the function, so it lives in
the runs table, not in a container's memory: one item per tenant and
calendar minute (`pk = TENANT-REQUESTS#<sha256 of the tenant>`,
`sk = MINUTE#<epoch minute>`; the tenant is hashed so any claim fits a key),
bumped by one conditional UpdateItem that refuses to pass the limit, so
concurrent requests cannot pass it together. The item carries the table's
TTL attribute (`expires_at`), so DynamoDB removes it after its minute; it is
no run's item, and the retention function's stream filter (sk `META` only)
never sees it. Cost: one write unit per authenticated request.

The window is fixed, not sliding: a tenant may send up to twice the limit
across a minute boundary. A counter DynamoDB cannot update (throttled,
unreachable) answers 503, as the store's own failures do.
"""

from __future__ import annotations

import hashlib
import math
import os
from typing import TYPE_CHECKING

from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent
from botocore.exceptions import BotoCoreError, ClientError

from agent_runtime import Clock
from agent_runtime.api.problems import ApiProblem
from agent_runtime.api.services import Authenticator
from functions.telemetry import count
from stores.base import StoreUnavailable

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

REQUESTS_PER_MINUTE = "AGENT_RUNTIME_TENANT_REQUESTS_PER_MINUTE"
PARTITION_PREFIX = "TENANT-REQUESTS#"
MINUTE = 60
# How long a minute's item outlives it before DynamoDB's TTL may remove it.
KEEP_SECONDS = 10 * MINUTE


def requests_per_minute_from_environment() -> int:
    text = os.environ.get(REQUESTS_PER_MINUTE, "").strip()
    try:
        limit = int(text) if text else 0
    except ValueError:
        raise ValueError(f"environment variable {REQUESTS_PER_MINUTE} is not a whole "
                         "number") from None
    if limit < 0:
        raise ValueError(f"environment variable {REQUESTS_PER_MINUTE} is negative")
    return limit


class TenantRequestLimit:
    """Admits at most `per_minute` requests of each tenant in each calendar minute."""

    def __init__(self, client: DynamoDBClient, table_name: str, *, per_minute: int,
                 clock: Clock) -> None:
        if per_minute < 1:
            raise ValueError("a tenant request limit needs per_minute >= 1")
        self.client = client
        self.table_name = table_name
        self.per_minute = per_minute
        self.clock = clock

    def admit(self, tenant: str) -> None:
        """Count one request of `tenant`; a 429 `ApiProblem` when it is past the limit."""
        now = self.clock.now().timestamp()
        minute = int(now // MINUTE)
        digest = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key={"pk": {"S": PARTITION_PREFIX + digest}, "sk": {"S": f"MINUTE#{minute}"}},
                UpdateExpression="ADD requests :one SET expires_at = :expires",
                # Refused at the limit, so no number of concurrent requests passes it.
                ConditionExpression="attribute_not_exists(requests) OR requests < :limit",
                ExpressionAttributeValues={
                    ":one": {"N": "1"}, ":limit": {"N": str(self.per_minute)},
                    ":expires": {"N": str((minute + 1) * MINUTE + KEEP_SECONDS)}})
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise StoreUnavailable("the tenant's request count could not be updated "
                                       f"({type(error).__name__})") from None
            count("TenantRequestsRefused")
            wait = max(1, math.ceil((minute + 1) * MINUTE - now))
            raise ApiProblem(429, f"this tenant sent {self.per_minute} requests this minute, "
                                  "as many as this API allows each tenant "
                                  "(TenantRequestsPerMinute)",
                             headers={"Retry-After": str(wait)}) from None
        except BotoCoreError:
            raise StoreUnavailable("the tenant's request count could not be updated") from None


class LimitedAuthenticator:
    """An `Authenticator` whose every authenticated request counts against its tenant's
    limit: the routes ask for the caller once per request (agent_runtime.api.guard)."""

    def __init__(self, inner: Authenticator, limit: TenantRequestLimit) -> None:
        self.inner = inner
        self.limit = limit

    def tenant(self, event: BaseProxyEvent) -> str:
        tenant = self.inner.tenant(event)
        self.limit.admit(tenant)
        return tenant
