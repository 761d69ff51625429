"""OTLP/HTTP export configured only by environment variables (issue 37, acceptance 2).

`agent-runtime run` and `agent-runtime serve`, each a real child process, send
their spans and metrics to a real OTLP/HTTP receiver on 127.0.0.1 that decodes
the protobuf bodies; nothing but `OTEL_*` variables tells them where it is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_runtime.telemetry.trace_ids import trace_id_for
from tests.api.serve_process import (
    ECHO,
    FIXTURES,
    REPO,
    running_serve,
    start,
    wait_for_status,
    wait_until,
)
from tests.otlp_receiver import Receiver, otlp_receiver

pytestmark = pytest.mark.slow

CHAIN = FIXTURES / "prompt-chain.agent.yaml"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
WAIT = 120.0  # a hang guard, not a speed limit


def otel_environment(receiver: Receiver, service: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_SERVICE_NAME=service,
               # short so a running serve exports while the test waits
               OTEL_BSP_SCHEDULE_DELAY="100", OTEL_METRIC_EXPORT_INTERVAL="200")
    return env


def names_in_trace(receiver: Receiver, run_id: str, service: str) -> list[str]:
    """The names of the spans of `run_id`'s trace, but for its commits (counted apart)."""
    return sorted(span.name for span in spans_in_trace(receiver, run_id, service)
                  if span.name != "commit")


def spans_in_trace(receiver: Receiver, run_id: str, service: str) -> list[Any]:
    return [span for resource, span in receiver.spans()
            if resource.get("service.name") == service
            and int.from_bytes(span.trace_id) == trace_id_for(run_id)]


def span_attributes(span: Any) -> dict[str, Any]:
    from tests.otlp_receiver import attributes

    return attributes(span.attributes)


def test_agent_runtime_run_exports_spans_and_metrics(tmp_path: Path) -> None:
    with otlp_receiver() as receiver:
        env = otel_environment(receiver, "otel-cli-test")
        env["PYTHONPATH"] = str(REPO)
        done = subprocess.run(
            [sys.executable, "-m", "agent_runtime.cli", "run", str(CHAIN), "--model",
             "scripted/echo", "--format", "json"], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=WAIT, check=False)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.strip().splitlines()[-1])
        # exported when the command exits: the providers flush at exit
        names = names_in_trace(receiver, result["run_id"], "otel-cli-test")
        commits = [span for span in spans_in_trace(receiver, result["run_id"], "otel-cli-test")
                   if span.name == "commit"]
        metrics = receiver.metric_names()
    assert len(commits) == 2  # the first two steps'; the last one's is the run's completion
    assert {span_attributes(span)["agent_runtime.store"] for span in commits} == {
        "SqliteRunStore"}
    assert names == sorted(["invoke_agent prompt-chain", "step draft", "step review", "step revise",
                            "chat echo", "chat echo", "chat echo"])
    chats = [span for _, span in receiver.spans() if span.name == "chat echo"]
    for chat in chats:
        attributes = span_attributes(chat)
        assert attributes["gen_ai.provider.name"] == "scripted"
        assert attributes["gen_ai.usage.input_tokens"] > 0
        assert attributes["gen_ai.usage.output_tokens"] > 0
    tokens = sum(span_attributes(chat)["gen_ai.usage.input_tokens"]
                 + span_attributes(chat)["gen_ai.usage.output_tokens"] for chat in chats)
    assert tokens == result["usage"]["input_tokens"] + result["usage"]["output_tokens"]
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration",
            "agent_runtime.runs.started", "agent_runtime.runs.finished",
            "agent_runtime.commit.duration"} <= set(metrics)
    assert metrics["gen_ai.client.token.usage"]["service.name"] == "otel-cli-test"
    assert not receiver.refused


def test_serve_exports_spans_and_metrics(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with otlp_receiver() as receiver:
        for name in list(os.environ):
            if name.startswith("OTEL_"):
                monkeypatch.delenv(name)
        for name, value in otel_environment(receiver, "otel-serve-test").items():
            if name.startswith("OTEL_"):
                monkeypatch.setenv(name, value)
        with running_serve(tmp_path) as server, server.client() as http:
            run = start(http, CHAIN.read_text(encoding="utf-8"))
            # a caller's trace context: this run's spans continue the caller's trace
            response = http.post("/runs", json={
                "manifest": CHAIN.read_text(encoding="utf-8"), "options": ECHO},
                headers={"traceparent": CALLER})
            assert response.status_code == 201, response.text
            called = response.json()["run"]
            # the run view names the trace its spans go to, the caller's here
            assert called["traceId"] == CALLER_TRACE
            assert run["traceId"] == f"{trace_id_for(run['runId']):032x}"
            for run_id in (run["runId"], called["runId"]):
                wait_for_status(http, run_id, "completed")
            # exported while serve runs, a batch at a time
            wait_until(lambda: len(names_in_trace(receiver, run["runId"],
                                                  "otel-serve-test")) == 7,
                       what="the run's seven spans at the receiver", timeout=WAIT)
            wait_until(lambda: len([span for _, span in receiver.spans()
                                    if span.trace_id.hex() == CALLER_TRACE]) >= 7,
                       what="the called run's spans at the receiver", timeout=WAIT)
            wait_until(lambda: "gen_ai.client.token.usage" in receiver.metric_names(),
                       what="token usage metrics at the receiver", timeout=WAIT)
        names = names_in_trace(receiver, run["runId"], "otel-serve-test")
    assert names.count("chat echo") == 3 and "invoke_agent prompt-chain" in names
    in_callers_trace = [span for _, span in receiver.spans()
                        if span.trace_id.hex() == CALLER_TRACE]
    attempt = next(span for span in in_callers_trace if span.name.startswith("invoke_agent"))
    assert attempt.parent_span_id.hex() == CALLER_SPAN
    assert span_attributes(attempt)["agent_runtime.run.id"] == called["runId"]
    assert not receiver.refused
