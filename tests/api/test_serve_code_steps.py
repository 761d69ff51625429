"""A code step through a real `serve`: its runs execute on uvloop's event loops where
uvloop is installed (the serve extra installs it), the CLI's on asyncio's. uvloop's
subprocess refused arguments the sandbox passed, so every code step `serve` ran
failed while the CLI's passed; only a run through `serve` shows that path."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from tests.agent_runtime.sandbox.sandbox_kit import SMALL_LIMITS, bubblewrap_sandbox
from tests.api.serve_process import TERMINAL, run_of, running_serve, start, wait_until

CALCULATION = {"schemaVersion": "1.0", "id": "calculation", "steps": [
    {"id": "calc", "type": "code", "language": "python",
     "code": "import json, os\n"
             "variables = json.load(open(os.environ['AGENT_VARIABLES_FILE']))\n"
             "print(variables['factor'] * 7)\n",
     "includeInFinalOutput": True}],
    "variables": [{"key": "factor", "type": "number"}]}


def test_a_code_step_runs_through_serve_on_its_run_loops(tmp_path: Path) -> None:
    bubblewrap_sandbox()  # skipped, saying why, where bubblewrap cannot run
    config = tmp_path / "host.config.yaml"
    config.write_text(yaml.safe_dump({"version": "1.0", "sandbox": SMALL_LIMITS}),
                      encoding="utf-8")
    with running_serve(tmp_path, args=["--config", str(config)]) as server, \
            server.client() as http:
        run = start(http, CALCULATION, variables={"factor": 6})
        done = wait_until(lambda: (view := run_of(http, run["runId"]))["status"] in TERMINAL
                          and view, what="the code step's run to end")
        log = server.output()
    assert done["status"] == "completed", done.get("error")
    assert done["output"] == "42\n"
    kind = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    assert f"{kind} event loop" in log
