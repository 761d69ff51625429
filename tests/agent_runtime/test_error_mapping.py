"""A store's refusals are reported the same way at every edge: the CLI exits 4
and the HTTP API answers 409 for exactly the errors in `stores.CONFLICT_ERRORS`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from agent_runtime.api.problems import register_problem_handlers
from agent_runtime.cli.errors import EXIT_CONFLICT, EXIT_FAILED, EXIT_NOT_FOUND, classify
from stores import CONFLICT_ERRORS, CorruptRecord, RunNotFound, StoreError, StoreUnavailable

EVENT = Path(__file__).resolve().parents[2] / "events" / "api-get-run.json"


def answer(error: Exception) -> int:
    """The status the API's one error mapping gives a route that raises `error`."""
    resolver = APIGatewayHttpResolver()
    register_problem_handlers(resolver, lambda path: [])

    @resolver.get("/runs/<run_id>")
    def get_run(run_id: str) -> dict[str, str]:
        raise error

    response = resolver.resolve(json.loads(EVENT.read_text(encoding="utf-8")), None)
    status: int = response["statusCode"]
    return status


@pytest.mark.parametrize("kind", CONFLICT_ERRORS, ids=lambda kind: kind.__name__)
def test_every_store_conflict_is_exit_4_and_http_409(kind: type[StoreError]) -> None:
    error = kind("refused")
    assert classify(error, None)[:2] == (EXIT_CONFLICT, "conflict")
    assert answer(error) == 409


def test_what_is_not_a_conflict_is_reported_as_what_it_is() -> None:
    assert classify(RunNotFound("run_1"), None)[0] == EXIT_NOT_FOUND
    assert answer(RunNotFound("run_1")) == 404
    assert classify(CorruptRecord("bad"), None)[:2] == (EXIT_FAILED, "store_damaged")
    assert answer(CorruptRecord("bad")) == 500
    assert classify(StoreUnavailable("locked"), None)[:2] == (EXIT_FAILED, "store_error")
    assert answer(StoreUnavailable("locked")) == 503
