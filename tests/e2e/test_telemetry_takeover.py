"""A SIGKILL mid-run and a takeover: the takeover's spans join the killed attempt's
trace (issue 37, acceptance 3), over a real OTLP/HTTP receiver."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import cli_process
import pytest

from agent_runtime.telemetry.trace_ids import attempt_span_id, trace_id_for
from tests.otlp_receiver import attributes, otlp_receiver

LEASE_SECONDS = 600  # far longer than the test: the takeover must not wait for it


@pytest.mark.slow
def test_a_takeover_after_sigkill_joins_the_killed_attempts_trace(tmp_path: Path) -> None:
    cli_process.write_four_steps(tmp_path)
    with otlp_receiver() as receiver:
        env = {name: value for name, value in cli_process.cli_env(tmp_path).items()
               if not name.startswith("OTEL_")}
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                   OTEL_SERVICE_NAME="otel-takeover-test", OTEL_BSP_SCHEDULE_DELAY="50",
                   OTEL_METRICS_EXPORTER="none")
        child = cli_process.spawn_cli(
            tmp_path, *cli_process.RUN_FOUR_STEPS, "--run-id", "killed", "--lease-seconds",
            str(LEASE_SECONDS), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def exported(name: str) -> bool:
            return any(span.name == name for _, span in receiver.spans())

        # `first` finished and its span went out; `second` waits for its slow answer
        cli_process.wait_for(lambda: exported("step first")
                             and len(cli_process.model_requests(tmp_path)) >= 2,
                             "the first step's span at the receiver", child=child)
        child.send_signal(signal.SIGKILL)
        child.wait()
        killed = [span for _, span in receiver.spans()]
        done = cli_process.run_cli(tmp_path, "resume", "killed", "--format", "json",
                                   "--allow-running-takeover", env=env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["attempt"] == 2
        spans = [span for _, span in receiver.spans()]
    taken_over = spans[len(killed):]
    trace_id = trace_id_for("killed").to_bytes(16)
    assert {span.trace_id for span in killed} == {trace_id}
    assert {span.trace_id for span in taken_over} == {trace_id}
    first = next(span for span in killed if span.name == "step first")
    # the killed attempt's own span never ended, but its id is known to its children
    assert int.from_bytes(first.parent_span_id) == attempt_span_id("killed", 1)
    attempt = next(span for span in taken_over if span.name == "invoke_agent four-steps")
    assert int.from_bytes(attempt.span_id) == attempt_span_id("killed", 2)
    assert [int.from_bytes(link.span_id) for link in attempt.links] == [
        attempt_span_id("killed", 1)]
    assert attributes(attempt.attributes)["agent_runtime.run.attempt"] == 2
    assert attributes(attempt.attributes)["agent_runtime.run.takeover"] is True
    assert sorted(span.name for span in taken_over if span.name.startswith("step")) == [
        "step fourth", "step second", "step third"]
    assert os.environ.get("OTEL_SERVICE_NAME") != "otel-takeover-test"  # the test's own env
