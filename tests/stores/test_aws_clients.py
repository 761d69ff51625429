"""The AWS clients the stores and functions make with botocore (stores/aws_clients.py).

Making a client sends nothing, so these run without AWS or moto; the AWS
suites (tests/stores/aws, tests/functions) call through such clients."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from botocore.config import Config

from stores import aws_clients


def test_a_session_given_a_region_makes_its_clients_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    made = aws_clients.client_in(aws_clients.session("eu-west-3"), "dynamodb")
    assert made.meta.region_name == "eu-west-3"
    assert made.meta.service_model.service_name == "dynamodb"


def test_a_session_without_one_reads_the_configured_region_and_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-southeast-2")
    made = aws_clients.client_in(aws_clients.session(), "s3",
                                 endpoint_url="http://127.0.0.1:5999")
    assert made.meta.region_name == "ap-southeast-2"
    assert made.meta.endpoint_url == "http://127.0.0.1:5999"


def test_the_process_clients_follow_the_environment_and_take_a_config(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-north-1")
    made = aws_clients.client("lambda", config=Config(retries={"total_max_attempts": 1}))
    assert made.meta.region_name == "eu-north-1"
    assert made.meta.config.retries["total_max_attempts"] == 1
    monkeypatch.setenv("AWS_DEFAULT_REGION", "sa-east-1")
    assert aws_clients.client("events").meta.region_name == "sa-east-1"


def test_threads_make_process_clients_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    made: list[Any] = []
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def make(service: str) -> None:
        start.wait()
        try:
            made.append(aws_clients.client(service))
        except BaseException as error:  # a test counts every failure, whatever its kind
            failures.append(error)

    threads = [threading.Thread(target=make, args=(service,))
               for service in ("dynamodb", "s3", "events", "stepfunctions") * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(client.meta.service_model.service_name for client in made) == sorted(
        ["dynamodb", "s3", "events", "stepfunctions"] * 2)
