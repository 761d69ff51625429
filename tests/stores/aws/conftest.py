"""Fixtures of the AWS store tests: moto in-process or over HTTP, resources from template.yaml.

A module shares one moto account (clients, the template's key and bucket);
each test gets a fresh table built from the template. Building botocore
clients is the slow part (~0.1 s each), so they are made once per module.
"""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_template import REGION, AwsResources, clients, create_resources, create_table
from moto import mock_aws
from moto.server import ThreadedMotoServer

from stores.dynamodb.s3 import S3BlobStore
from stores.dynamodb.store import DynamoDbRunStore
from tests import moto_dynamodb

FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SECURITY_TOKEN": "testing", "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}


@pytest.fixture(autouse=True, scope="module")
def fake_credentials() -> Iterator[None]:
    """Credentials moto accepts, and nothing that could reach a real account."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in FAKE_AWS.items():
            patch.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB",
                     "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
            patch.delenv(name, raising=False)
        yield


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def aws_account(fake_credentials: None) -> Iterator[AwsResources]:
    """moto in-process for a module: the template's key and bucket, and a first table."""
    with mock_aws():
        yield create_resources(clients(boto3.session.Session()), table=unique("runs"),
                               bucket=unique("blobs"))


@pytest.fixture
def aws(aws_account: AwsResources) -> Iterator[AwsResources]:
    """A fresh table from the template, in the module's moto account."""
    resources = create_table(aws_account, unique("runs"))
    yield resources
    resources.dynamodb.delete_table(TableName=resources.table)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto's server on a free local port: its endpoint URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def aws_server_account(moto_server: str, fake_credentials: None) -> AwsResources:
    """The template's key and bucket in moto's server (reset first), reached over HTTP."""
    reset = urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST")
    with urllib.request.urlopen(reset, timeout=10):
        pass
    return create_resources(clients(boto3.session.Session(), moto_server),
                            table=unique("runs"), bucket=unique("blobs"))


@pytest.fixture
def aws_server(aws_server_account: AwsResources) -> Iterator[AwsResources]:
    """A fresh table from the template in moto's server."""
    resources = create_table(aws_server_account, unique("runs"))
    yield resources
    resources.dynamodb.delete_table(TableName=resources.table)


def open_store(aws: AwsResources, *, client: Any = None, prefix: str = "checkpoints/",
               **options: Any) -> DynamoDbRunStore:
    """A DynamoDbRunStore on `aws` (through `client` if given), blobs under the project key."""
    blobs = S3BlobStore(aws.bucket, aws.key_arn, prefix=prefix, client=aws.s3)
    return DynamoDbRunStore(aws.table, blobs=blobs, client=client or aws.dynamodb, **options)


@pytest.fixture
def item_rollback() -> Iterator[None]:
    """moto's TransactWriteItems rolling back by item (tests/moto_dynamodb.py)."""
    with moto_dynamodb.item_rollback():
        yield
