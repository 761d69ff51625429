"""Random operation sequences on DynamoDbRunStore, checked against the plain model of
the contract in tests/stores/test_store_state_machine.py (fewer examples than the
local stores: each step is several moto requests)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from aws_template import AwsResources, create_table
from conftest import open_store, unique
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

# The model lives beside the local stores' tests; reuse it rather than copy it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_store_state_machine import StoreMachine


@pytest.mark.slow
def test_dynamodb_store_agrees_with_the_contract_model(aws_account: AwsResources) -> None:
    def fresh_store(directory: Path) -> object:
        return open_store(create_table(aws_account, unique("machine")))

    machine = type("DynamoDbStoreMachine", (StoreMachine,),
                   {"open_store": staticmethod(fresh_store)})
    run_state_machine_as_test(machine, settings=settings(
        max_examples=10, stateful_step_count=40, deadline=None))
