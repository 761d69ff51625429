"""The RunStore contract suite, unchanged, on DynamoDbRunStore: moto in-process and over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aws_template import AwsResources
from conftest import open_store

from stores.base import RunStore
from stores.conformance import RunStoreConformance


class TestDynamoDbRunStore(RunStoreConformance):
    @pytest.fixture
    def store(self, aws: AwsResources) -> Iterator[RunStore]:
        with open_store(aws) as store:
            yield store


@pytest.mark.slow
class TestDynamoDbRunStoreOverHttp(RunStoreConformance):
    """The same suite against moto's server: real HTTP, botocore's real serialisation."""

    @pytest.fixture
    def store(self, aws_server: AwsResources) -> Iterator[RunStore]:
        with open_store(aws_server) as store:
            yield store
