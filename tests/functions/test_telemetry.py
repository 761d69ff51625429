"""Logs and metrics of a run carry no prompt text, model output or variable values.

A run whose variable (and so its prompts and the echo model's output) and
whose approval response hold a canary string goes through every function:
start, Advance, approval, resume, a reconciler pass. The canary must
appear in the run's output (so the test would see a leak) and nowhere in what
the functions printed (Powertools logs and EMF metrics), logged, returned to
the state machine, or in the executions' histories.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from aws_stack import Deployment, sample_event

from agent_runtime import AgentRuntime, RunStatus
from functions.executions import execution_name
from functions.telemetry import logger

MANIFEST = Path(__file__).resolve().parents[1] / "fixtures" / "manifests" / "approval.agent.yaml"
CANARY = "canary-7f3d9a41-never-log-me"

pytestmark = pytest.mark.slow


def test_logs_and_metrics_of_a_run_hold_no_prompt_output_or_variable_value(
        deployment: Deployment, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    stack, store = deployment.stack, deployment.services.store
    # The Logger's handler keeps the stdout it was created with (pytest's, at
    # collection); Lambda's stdout never changes, the test's does.
    for handler in logger.handlers:
        if isinstance(handler, logging.StreamHandler):
            monkeypatch.setattr(handler, "stream", sys.stdout)
    run_id = deployment.services.runtime().create_run(
        manifest=MANIFEST, variables={"request": f"Explain {CANARY} to customers."},
        options={"model": "scripted/echo"}).run_id
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()
    stack.wait_for(execution_name(run_id, 1))
    AgentRuntime(store=store).approve(run_id, response={"note": CANARY})
    stack.put_resume_request(run_id, attempt=1, reason="approval-recorded")
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 2))["status"] == "SUCCEEDED"
    stack.invoke("ReconcilerFunction", sample_event("scheduled-reconcile.json"))

    done = store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert CANARY in json.dumps(done.output)  # the run did carry it

    printed = capfd.readouterr()
    lines = [json.loads(line) for line in printed.out.splitlines() if line.startswith("{")]
    metrics = {metric["Name"] for line in lines if "_aws" in line
               for metric in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert {"ExecutionStarted", "RunReserved", "RunSuspended", "RunCompleted",
            "ReconcileResumed"} <= metrics
    logged = {line["message"] for line in lines if "message" in line}
    assert {"run.started", "model.completed", "approval.resolved", "run.completed"} <= logged
    assert CANARY not in printed.out and CANARY not in printed.err
    assert caplog.records and all(CANARY not in record.getMessage() and CANARY not in json.dumps(
        record.__dict__, default=str) for record in caplog.records)

    calls = [(call.event, call.result) for call in stack.lambdas.invocations]
    assert CANARY not in json.dumps(calls, default=str)
    for name in stack.executions():
        history = stack.stepfunctions.get_execution_history(
            executionArn=stack.execution_arn(name))
        assert CANARY not in json.dumps(history["events"], default=str)
