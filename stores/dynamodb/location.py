"""How a store location names a DynamoDB store: `open_store("dynamodb", LOCATION)`.

The CLI's `--store-driver dynamodb --store LOCATION` comes here.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qsl

from botocore.exceptions import NoRegionError

from stores.aws_clients import client_in, session
from stores.dynamodb.s3 import S3BlobStore
from stores.dynamodb.store import DEFAULT_RETENTION, DynamoDbRunStore
from stores.resume_events import ResumeEvents, resume_events

# `event_bus` is not the table's: it names the stack's bus, where a resume is
# requested (`stack_resume_events`).
_OPTIONS = {"bucket", "kms_key", "prefix", "region", "endpoint_url", "inline_limit",
            "retention_days", "event_bus"}


def open_dynamodb_store(location: str) -> DynamoDbRunStore:
    """The store at `TABLE[?bucket=B&kms_key=K&prefix=P&region=R&endpoint_url=U
    &inline_limit=BYTES&retention_days=D&event_bus=BUS]` (a leading `dynamodb://` is
    allowed; `event_bus` is for `stack_resume_events`).

    `bucket` with `kms_key` (a key id, ARN or alias) adds the S3 blob store;
    `retention_days=0` turns the TTL off. Credentials, region and endpoint
    otherwise come from botocore's own configuration (`stores.aws_clients`):
    AWS_REGION / AWS_DEFAULT_REGION, and AWS_ENDPOINT_URL (or
    AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL_S3), which botocore reads
    itself; `endpoint_url=` sets one endpoint for both services, as a local
    emulator needs.
    """
    table, options = _parsed(location)
    if bool(options.get("bucket")) != bool(options.get("kms_key")):
        raise ValueError("a DynamoDB store location names bucket= and kms_key= together")
    try:
        inline_limit = int(options["inline_limit"]) if "inline_limit" in options else None
        days = float(options.get("retention_days", DEFAULT_RETENTION.days))
    except ValueError as error:
        raise ValueError(f"DynamoDB store location {location!r}: {error}") from error
    aws = session(options.get("region") or None)
    endpoint = options.get("endpoint_url") or None
    try:
        blobs = None if not options.get("bucket") else S3BlobStore(
            options["bucket"], options["kms_key"], prefix=options.get("prefix", "checkpoints/"),
            client=client_in(aws, "s3", endpoint_url=endpoint))
        client = client_in(aws, "dynamodb", endpoint_url=endpoint)
    except NoRegionError:  # botocore's words name no setting; these do
        raise ValueError("no AWS region for the DynamoDB store: set AWS_REGION (or "
                         "AWS_DEFAULT_REGION), or add region=REGION to the location") from None
    return DynamoDbRunStore(table, blobs=blobs, inline_limit=inline_limit, client=client,
                            retention=timedelta(days=days) if days > 0 else None)


def _parsed(location: str) -> tuple[str, dict[str, str]]:
    table, _, query = location.removeprefix("dynamodb://").partition("?")
    if not table or any(c in table for c in "/#:&="):
        raise ValueError(f"not a DynamoDB store location: {location!r} "
                         "(expected TABLE?bucket=B&kms_key=K)")
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise ValueError(f"unknown DynamoDB store option(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(_OPTIONS))}")
    return table, options


def stack_resume_events(location: str) -> ResumeEvents | None:
    """Where a resume of a run in this store is requested from its stack: the bus of
    the location's `event_bus=`, else of AGENT_RUNTIME_EVENT_BUS; None when unknown."""
    _, options = _parsed(location)
    return resume_events(options.get("event_bus"), region=options.get("region") or None,
                         endpoint_url=options.get("endpoint_url") or None)
