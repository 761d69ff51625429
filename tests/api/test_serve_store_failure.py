"""A run whose commit the store refused (a full disk) is taken over again by the same
`serve` once the store takes commits again, not left `running` until a restart (issue
34): before, its owner was the live server, so no reconciler would touch it.

The store is SQLite under a plugin driver (entry point group `agent_runtime.stores`,
installed for the test) that refuses every commit, as a full disk does, while a
marker file exists; reads always answer.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_chat_model import MODEL, FakeChatModel, fake_chat_model
from serve_process import run_of, running_serve, wait_for_status, wait_until
from slow_receiver import SlowReceiver
from test_serve_handover import POLICY, ask_then_call

from stores.drivers import ENTRY_POINT_GROUP

pytestmark = pytest.mark.slow

PLUGIN = textwrap.dedent('''
    """SQLite whose commits fail as on a full disk while `<location>.full` exists."""
    import errno
    from pathlib import Path

    from stores.sqlite import SqliteRunStore


    class FullDiskStore(SqliteRunStore):
        def __init__(self, path):
            super().__init__(path)
            self.marker = Path(str(path) + ".full")

        def _refuse(self):
            if self.marker.exists():
                raise OSError(errno.ENOSPC, "No space left on device")


    for _name in ("save_checkpoint", "save_checkpoint_settling", "suspend_run",
                  "complete_run", "fail_run", "resume_run"):
        def _refusing(self, *args, _write=getattr(SqliteRunStore, _name), **kwargs):
            self._refuse()
            return _write(self, *args, **kwargs)
        setattr(FullDiskStore, _name, _refusing)


    def open_full_disk(location):
        return FullDiskStore(Path(location))
''')


def install_plugin(site: Path) -> None:
    site.mkdir()
    (site / "full_disk_store.py").write_text(PLUGIN, encoding="utf-8")
    info = site / "full_disk_store-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: full-disk-store\n"
                                   "Version: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nfull-disk = full_disk_store:open_full_disk\n",
        encoding="utf-8")


@pytest.fixture
def model() -> Iterator[FakeChatModel]:
    with fake_chat_model() as fake:
        yield fake


def test_a_refused_commit_is_retried_by_the_same_server_once_the_store_answers(
        tmp_path: Path, model: FakeChatModel, receiver: SlowReceiver) -> None:
    receiver.release.set()
    site = tmp_path / "site"
    install_plugin(site)
    full = Path(f"{tmp_path / 'runs.sqlite'}.full")
    config = model.config_file(tmp_path, policy=POLICY)
    args = ["--store-driver", "full-disk", "--config", str(config)]
    with running_serve(tmp_path, args=args, pythonpath=[site]) as serve, \
            serve.client() as http:
        answer = http.post("/runs", json={"manifest": ask_then_call(receiver.url),
                                          "variables": {"key": "only"},
                                          "options": {"model": MODEL}})
        assert answer.status_code == 201, answer.text
        run_id = answer.json()["run"]["runId"]
        assert model.wait_for_in_flight(1)
        full.touch()  # the disk fills while the model answers
        model.release.set()
        wait_until(lambda: serve.output().count("tries again once the store takes") >= 2,
                   what="serve to retry the run while the disk is full")
        assert run_of(http, run_id)["status"] == "running"  # still this server's
        full.unlink()  # space again
        done = wait_for_status(http, run_id, "completed")
    assert done["attempt"] == 2  # a reservation the store refused is no attempt
    assert receiver.keys("/call") == [f"{run_id}:call"]
    # The answer whose commit was refused is asked for again; nothing else repeats.
    assert model.requests_naming("hello from only\"") == 2
