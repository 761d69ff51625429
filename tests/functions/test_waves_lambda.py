"""A parallel run on the state machine under moto: a wave spans Advance slices.

Every Advance has less time left than the margin, so each stops at its first
commit point; the wave's other members finish the request they have in flight
and stop at theirs. The next slice resumes only what did not finish, planning
the same waves from the setting kept with the run, and the run ends as it does
locally, with no answered request asked again (the scripted request log).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from advance_slices import wait_for_chain
from aws_stack import Deployment

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.models.scripted import REQUEST_LOG_ENV
from stores.memory import MemoryRunStore

pytestmark = pytest.mark.slow

AGENT = """schemaVersion: '1.0'
id: lambda-wave
steps:
  - {id: north, type: prompt, prompt: North, outputVariable: north}
  - {id: south, type: prompt, prompt: South, outputVariable: south}
  - {id: east, type: prompt, prompt: East, outputVariable: east}
  - {id: summary, type: prompt, prompt: "{{ north }} {{ south }} {{ east }}",
     includeInFinalOutput: true}
"""
RUN = """schemaVersion: '1.0'
agent: {ref: agent.yaml}
execution: {mode: parallel, maxConcurrency: 3}
"""
# Each member first asks for a tool it does not have: two commit points apiece.
SCRIPT = """byStep:
  north: [{toolCalls: [{name: look}], delayMs: 2}, {text: cold, delayMs: 2}]
  south: [{toolCalls: [{name: look}], delayMs: 6}, {text: warm, delayMs: 6}]
  east: [{toolCalls: [{name: look}], delayMs: 4}, {text: windy, delayMs: 4}]
  summary: [{text: weather}]
"""


def files(directory: Path) -> tuple[Path, dict[str, Any]]:
    (directory / "agent.yaml").write_text(AGENT, encoding="utf-8")
    (directory / "run.yaml").write_text(RUN, encoding="utf-8")
    (directory / "script.yaml").write_text(SCRIPT, encoding="utf-8")
    return directory / "run.yaml", {"model": f"scripted/{directory / 'script.yaml'}"}


def test_a_wave_spans_advance_slices_and_resumes_only_unfinished_members(
        deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_manifest, options = files(tmp_path)
    local = AgentRuntime(store=MemoryRunStore()).run_sync(manifest=run_manifest, options=options)
    assert local.status is RunStatus.COMPLETED

    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv(REQUEST_LOG_ENV, str(log))
    stack, store, lambdas = deployment.stack, deployment.services.store, deployment.lambdas
    config = tmp_path / "agent-runtime.yaml"  # this host's policy lists the test's script
    config.write_text(f"version: '1.0'\npolicy: {{scriptFiles: ['{tmp_path / 'script.yaml'}']}}\n",
                      encoding="utf-8")
    deployment.configure(config)
    margin_ms = deployment.services.settings.advance_margin_seconds * 1000
    lambdas.remaining_ms["AdvanceFunction"] = int(margin_ms) - 1
    record = deployment.services.runtime().create_run(manifest=run_manifest, options=options)
    assert record.options["execution"] == {"mode": "parallel", "maxConcurrency": 3}
    stack.put_resume_request(record.run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()
    chain = wait_for_chain(stack, record.run_id, 1)
    assert {execution["status"] for execution in chain} == {"SUCCEEDED"}

    done = store.load_run(record.run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.attempt == 1
    assert done.output == local.output == "weather"
    statuses = [call.result["status"] for call in lambdas.calls("AdvanceFunction")]
    assert statuses[-1] == "completed" and statuses.count("continue") >= 3
    assert len(chain) == len(statuses)  # one execution per slice
    # the wave's record went through members mid-way (a tool call pending) and a
    # wave part finished, part not, over five slices
    waves = [checkpoint.cursor[0].continuation["wave"]
             for info in store.list_checkpoints(record.run_id)
             if (checkpoint := store.load_checkpoint(record.run_id, info.seq)) is not None
             and checkpoint.cursor and "wave" in checkpoint.cursor[0].continuation]
    assert any("pending" in progress for wave in waves for progress in wave["members"].values())
    assert any(wave["finished"] and wave["members"] for wave in waves)
    # no request was asked twice: two per member, one for the summary
    asked = Counter(json.loads(line)["step_id"] for line in log.read_text().splitlines())
    assert asked == {"north": 2, "south": 2, "east": 2, "summary": 1}
