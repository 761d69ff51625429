"""How FileRunStore keeps answers to suspended runs: committed in run.json, kept in a file.

A decision (`resolve_approval`: an approval, or how to settle an unknown
effect) commits in `run.json` first, as `suspension.decision`: that is what
the engine reads on resume. `approvals/<sha256(id)>.json` is its lasting
copy, written after, and must name the run and the approval it is stored
under; it outlives the next suspension, which replaces
`suspension.decision`. A crash between the two leaves the decision in
`run.json` only, and `restore_decision` writes the file from it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from stores.atomic_files import decode_body, hashed_name, read_sealed, seal, write_atomic
from stores.base import CorruptRecord
from stores.records import ApprovalDecision, RunRecord, encode_record


def _path(run_dir: Path, approval_id: str) -> Path:
    return run_dir / "approvals" / hashed_name(approval_id)


def _committed(run_dir: Path, run: RunRecord) -> ApprovalDecision | None:
    """The decision run.json holds in the run's suspension, if any."""
    suspension = run.suspension
    if suspension is None or suspension.decision is None:
        return None
    try:
        return ApprovalDecision.model_validate({**suspension.decision, "run_id": run.run_id})
    except ValidationError as error:
        raise CorruptRecord(f"{run_dir / 'run.json'}: suspension.decision is not an approval "
                            f"decision ({error.errors()[0]['msg']})") from error


def recorded_decision(run_dir: Path, run: RunRecord, approval_id: str) -> ApprovalDecision | None:
    """The answer recorded for `approval_id`: its file, else what run.json committed."""
    path = _path(run_dir, approval_id)
    stored = read_sealed(path)
    if stored is not None:
        decision = decode_body(ApprovalDecision, path, stored[1])
        if (decision.run_id, decision.approval_id) != (run.run_id, approval_id):
            raise CorruptRecord(f"{path}: holds the answer to {decision.approval_id!r} of run "
                                f"{decision.run_id!r}")
        return decision
    committed = _committed(run_dir, run)
    return committed if committed is not None and committed.approval_id == approval_id else None


def write_decision(run_dir: Path, decision: ApprovalDecision) -> None:
    """Write the lasting copy of a decision run.json committed."""
    write_atomic(_path(run_dir, decision.approval_id), seal(encode_record(decision), {}))


def restore_decision(run_dir: Path, run: RunRecord) -> None:
    """Write the file of a decision a crash left only in run.json."""
    decision = _committed(run_dir, run)
    if decision is not None and not _path(run_dir, decision.approval_id).exists():
        write_decision(run_dir, decision)
