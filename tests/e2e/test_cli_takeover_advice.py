"""What `resume` says of a run still marked running, for owners a kill test cannot
make (another host's, an expired lease): each refusal names --allow-running-takeover
and when it applies. (A killed and a live owner of this host: test_kill_resume.py.)"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from agent_runtime.cli import main
from agent_runtime.cli.takeover import owner_status, takeover_refusal
from stores.records import RunRecord, RunStatus, utc_now
from stores.sqlite import SqliteRunStore

APPROVAL = Path(__file__).resolve().parents[2] / "tests/fixtures/manifests/approval.agent.yaml"


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunRecord:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENT_RUNTIME_STORE", raising=False)
    assert main(["run", str(APPROVAL), "--model", "scripted/echo", "--run-id", "r1",
                 "--events", "none", "--store", "runs.sqlite"]) == 10
    with SqliteRunStore("runs.sqlite") as store:
        found = store.load_run("r1")
    assert found is not None
    return found


def _running(record: RunRecord, owner: str, expires_in: float) -> RunRecord:
    return record.model_copy(update={"status": RunStatus.RUNNING, "lease_owner": owner,
                                     "lease_expires_at": utc_now()
                                     + timedelta(seconds=expires_in)})


def test_an_owner_on_another_host(record: RunRecord) -> None:
    held = _running(record, "elsewhere.example:4242", 600)
    status = owner_status(held)
    refusal = takeover_refusal(held, status, takeover=False, now=utc_now(),
                               store_flags=" --store-driver sqlite --store runs.sqlite")
    assert refusal is not None
    text = str(refusal)
    assert "lease held by \"elsewhere.example:4242\" until 20" in text
    assert "take the run over with --allow-running-takeover once the lease expires" in text
    assert "owner on host 'elsewhere.example'" in text
    assert "agent-runtime resume r1 --store-driver sqlite --store runs.sqlite " \
           "--allow-running-takeover" in text
    asked = takeover_refusal(held, status, takeover=True, now=utc_now())
    assert asked is not None
    assert "--allow-running-takeover: takeover is allowed only after it expires, or at once " \
           "when its owner was a process of this host that is gone, and that cannot be told " \
           "here (owner on host 'elsewhere.example'" in str(asked)
    assert "retry once the lease expires" in str(asked)


def test_an_expired_lease(record: RunRecord) -> None:
    lapsed = _running(record, "elsewhere.example:4242", -5)
    status = owner_status(lapsed)
    refusal = takeover_refusal(lapsed, status, takeover=False, now=utc_now())
    assert refusal is not None
    assert "which has expired: if that owner died, take the run over with " \
           "--allow-running-takeover: agent-runtime resume r1 --allow-running-takeover" \
           in str(refusal)
    assert takeover_refusal(lapsed, status, takeover=True, now=utc_now()) is None
