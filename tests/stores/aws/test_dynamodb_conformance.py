"""The RunStore contract suite, unchanged, on DynamoDbRunStore: moto in-process and over HTTP.

Each request runs atomically, as on DynamoDB (`item_rollback`): the suite's
concurrent cases (one resume winning, one create per run key) race threads, and
moto alone lets another thread read a transaction half written.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aws_template import AwsResources
from conftest import open_store

from stores.base import RunStore
from stores.conformance import RunStoreConformance


@pytest.mark.usefixtures("item_rollback")
class TestDynamoDbRunStore(RunStoreConformance):
    @pytest.fixture
    def store(self, aws: AwsResources) -> Iterator[RunStore]:
        with open_store(aws) as store:
            yield store


@pytest.mark.slow
@pytest.mark.usefixtures("item_rollback")
class TestDynamoDbRunStoreOverHttp(RunStoreConformance):
    """The same suite against moto's server: real HTTP, botocore's real serialisation."""

    @pytest.fixture
    def store(self, aws_server: AwsResources) -> Iterator[RunStore]:
        with open_store(aws_server) as store:
            yield store
