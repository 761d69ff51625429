"""An MCP server written to the reference implementation's idempotency contract
deduplicates a tool call the runtime repeats after it was SIGKILLed.

The `agent-runtime` process (and, with it, the stdio server it started) dies
after the server applied a transfer and before the runtime recorded the
result. The resumed run calls the tool again with the same key in
`_meta["agent-runtime/idempotency-key"]`, and the server answers from its
ledger instead of moving the money twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import cli_process
import pytest
import yaml

from stores.sqlite import SqliteRunStore

SERVER = Path(__file__).resolve().parent / "mcp_ledger_server.py"

MANIFEST = """schemaVersion: '1.0'
id: pay
model: {provider: openai, model: gpt-5.6}
connections:
  - {ref: ledger, alias: bank, mode: read_write, tools: [transfer]}
steps:
  - id: pay
    type: prompt
    prompt: Pay the invoice.
    tools: [bank__transfer]
    includeInFinalOutput: true
"""


def write_run(workdir: Path) -> None:
    (workdir / "pay.agent.yaml").write_text(MANIFEST)
    (workdir / "pay.script.yaml").write_text(yaml.safe_dump({"responses": [
        {"toolCalls": [{"name": "bank__transfer",
                        "arguments": {"account": "acme", "amount": 100}}]},
        {"text": "Paid."}]}))
    (workdir / "host.config.yaml").write_text(yaml.safe_dump({
        "version": "1.0", "connections": {"ledger": {
            "driver": "mcp", "transport": "stdio", "command": sys.executable,
            "args": [str(SERVER), str(workdir)], "mode": "read_write",
            "tools": ["transfer"],
            # required and patient: a slow start on a loaded machine fails at the connection
            "required": True, "connectTimeoutMs": 300_000}}}))


def lines(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_a_call_repeated_after_sigkill_is_deduplicated_by_the_key_in_meta(
        tmp_path: Path) -> None:
    write_run(tmp_path)
    (tmp_path / "hold").touch()
    child = cli_process.spawn_cli(
        tmp_path, "run", "pay.agent.yaml", "--config", "host.config.yaml",
        "--model", "scripted/pay.script.yaml", "--run-id", "paid",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    cli_process.wait_for(lambda: len(lines(tmp_path / "ledger.jsonl")) == 1,
                         "the transfer applied", child=child)
    # The machine dies: the runtime and its server, between the side effect and its record.
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    (tmp_path / "hold").unlink()

    done = cli_process.run_cli(tmp_path, "resume", "paid", "--allow-running-takeover",
                               "--config", "host.config.yaml", "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["status"], result["output"]) == ("completed", "Paid.")

    with SqliteRunStore(tmp_path / ".agent-runtime" / "runs.sqlite") as store:
        transcript = store.load_latest_checkpoint("paid").transcript
    keys = [part["call"]["idempotencyKey"] for item in transcript
            for part in item["content"] if part["type"] == "tool-call"]
    # Sent twice with the run's one key; the money moved once.
    assert lines(tmp_path / "calls.jsonl") == [{"key": keys[0], "repeat": False},
                                               {"key": keys[0], "repeat": True}]
    assert lines(tmp_path / "ledger.jsonl") == [
        {"key": keys[0], "account": "acme", "amount": 100}]
