"""A store an installed distribution adds (entry point group `agent_runtime.stores`) is
chosen by `--store-driver NAME`, with no change to this project."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import cli_process
from cli_process import REPO, run_cli

from stores.drivers import ENTRY_POINT_GROUP

PLUGIN = textwrap.dedent('''
    """A third-party store: SQLite under another name, marking each open."""
    from pathlib import Path

    from stores.sqlite import SqliteRunStore


    class LedgerStore(SqliteRunStore):
        pass


    def open_ledger(location):
        if location is None:
            raise ValueError("the ledger store needs a location")
        with open(location + ".opened", "a") as marks:
            marks.write("opened\\n")
        return LedgerStore(Path(location))
''')


def install_plugin(site: Path) -> None:
    """A distribution on `site`, as pip installs one: its module and its metadata."""
    (site / "ledger_store.py").write_text(PLUGIN)
    info = site / "ledger_store-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ledger-store\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nledger = ledger_store:open_ledger\n")


def test_an_installed_store_driver_is_chosen_by_name(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install_plugin(site)
    cli_process.write_four_steps(tmp_path)
    env = cli_process.cli_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(site)])
    ledger = tmp_path / "runs.ledger"

    done = run_cli(tmp_path, *cli_process.RUN_FOUR_STEPS, "--store-driver", "ledger",
                   "--store", str(ledger), "--format", "json", env=env)
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    listed = run_cli(tmp_path, "list", "--store-driver", "ledger", "--store", str(ledger),
                     "--format", "json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout
    # The plugin's opener made both stores (and the runs live in its file).
    assert (tmp_path / "runs.ledger.opened").read_text().splitlines() == ["opened", "opened"]
    assert ledger.is_file()


def test_an_unknown_driver_is_refused_with_the_names_there_are(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install_plugin(site)
    env = cli_process.cli_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(site)])
    done = run_cli(tmp_path, "list", "--store-driver", "nosuch", env=env)
    assert done.returncode == 2
    assert "nosuch" in done.stderr
    assert "memory, file, sqlite, dynamodb, ledger" in done.stderr
