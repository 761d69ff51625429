"""The CLI's help, version and completion, and what its start-up loads: `--help`
builds the parser without the engine, `validate` checks a manifest without the
engine, the stores, jsonschema or httpx (speed itself: bench/cli_startup.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_runtime import reconcile
from agent_runtime.cli import flags as cli_flags
from agent_runtime.cli.main import COMMANDS, build_parser, main

REPO = Path(__file__).resolve().parents[2]
CHAIN = REPO / "tests" / "fixtures" / "manifests" / "prompt-chain.agent.yaml"

LOADED = """
import sys
from agent_runtime.cli import main
code = main(sys.argv[1:])
heavy = ("agent_runtime.engine", "stores", "jsonschema", "httpx", "rich", "logging",
         "importlib.metadata", "pydantic.plugin._loader")
print("loaded:" + ",".join(name for name in heavy if name in sys.modules))
sys.exit(code)
"""


def _loaded(*argv: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", LOADED, *argv], capture_output=True,
                          text=True, timeout=120, check=False,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith("loaded:")
    return [name for name in last.removeprefix("loaded:").split(",") if name]


def test_help_and_validate_load_only_what_they_use() -> None:
    assert _loaded("validate", str(CHAIN)) == []
    # The parser alone (what `--help` and `--version` build): not even pydantic.
    done = subprocess.run([sys.executable, "-c", "import sys\nfrom agent_runtime.cli.main import "
                           "build_parser\nbuild_parser()\nprint('agent_runtime.engine' in "
                           "sys.modules, 'pydantic' in sys.modules)"],
                          capture_output=True, text=True, timeout=120, check=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.stdout.split() == ["False", "False"]


AFTER_VALIDATE = """
import sys
from pydantic import BaseModel
from agent_runtime.cli import main
assert main(sys.argv[1:]) == 0
class Later(BaseModel):
    x: int
Later(x=1)
from pydantic.plugin import _loader
print(type(_loader.get_plugins()).__name__, "importlib.metadata" in sys.modules)
"""


def test_validate_skips_pydantic_plugin_lookup_only_while_it_checks_the_manifest() -> None:
    # Without plugins (telemetry) validate never imports importlib.metadata
    # (asserted above); a model built after it gets pydantic's own loader back.
    done = subprocess.run([sys.executable, "-c", AFTER_VALIDATE, "validate", str(CHAIN)],
                          capture_output=True, text=True, timeout=120, check=False,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["dict_values", "True"]


def test_every_subcommand_has_a_description_and_an_example(
        capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    subcommands = next(action for action in parser._actions
                       if action.dest == "command").choices  # type: ignore[union-attr]
    assert set(subcommands) == set(COMMANDS)
    for name in subcommands:
        with pytest.raises(SystemExit) as ended:
            main([name, "--help"])
        assert ended.value.code == 0
        text = capsys.readouterr().out
        assert text.startswith(f"usage: agent-runtime {name}")
        if name != "serve":  # serve's own module documents its example
            assert "example:\n  agent-runtime " in text or "eval " in text, name


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    import agent_runtime

    assert capsys.readouterr().out.strip() == f"agent-runtime {agent_runtime.__version__}"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_names_every_subcommand_and_flag(
        shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    for word in ("resume", "reconcile", "--allow-running-takeover", "--grace-seconds"):
        assert word.removeprefix("--") in script
    if shell == "bash":
        done = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True,
                              check=False)
        assert done.returncode == 0, done.stderr


def test_the_parser_repeats_the_reconcilers_defaults() -> None:
    assert cli_flags.DEFAULT_MAX_TAKEOVERS == reconcile.DEFAULT_MAX_TAKEOVERS
    assert cli_flags.DEFAULT_RESUME_GRACE_SECONDS == reconcile.DEFAULT_RESUME_GRACE_SECONDS


def test_a_check_as_the_whole_process_answers_as_one_called_in_process(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The command line's validate runs with the collector off and frees
    # nothing at exit (cli._check_then_exit); its verdicts are main()'s.
    broken = tmp_path / "broken.agent.yaml"
    broken.write_text("schemaVersion: '1.0'\nsteps:\n  - id: a\n    type: prompt\n")
    for manifest, code in ((CHAIN, 0), (broken, 2)):
        done = subprocess.run([sys.executable, "-m", "agent_runtime.cli", "validate",
                               str(manifest)], capture_output=True, text=True, timeout=120,
                              check=False, env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert main(["validate", str(manifest)]) == code == done.returncode
        called = capsys.readouterr()
        assert (done.stdout, done.stderr) == (called.out, called.err)
        assert (done.stdout if code == 0 else done.stderr).strip()
