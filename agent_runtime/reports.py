"""What the CLI prints: run results, records, checkpoints, lists and events.

`--format json` prints one object `{run_id, status, attempt, output,
suspension, usage}`; `pretty` is for people; `ndjson` streams events as JSON
lines and ends with the result object.

Run outputs, ids, prompts and messages may hold whatever a model or a user
wrote, so nothing reaches the terminal raw: JSON goes through
`escape_json_text` (still the same JSON), everything else through
`printable` (multi-line text keeps its newlines; one-line fields escape them).
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from stores.records import CheckpointInfo, EffectRecord, RunRecord

from agent_runtime.events import Event
from agent_runtime.excerpts import escape_json_text, printable
from agent_runtime.reconcile import Action, ReconcileSummary, RunOutcome
from agent_runtime.results import RunResult


def to_json_text(value: Any, *, indent: int | None = None) -> str:
    """JSON for a terminal or a pipe: non-ASCII text stays readable, and every
    character that could act on a terminal is a `\\u` escape."""
    return escape_json_text(json.dumps(value, indent=indent, ensure_ascii=False, default=str))


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return printable(output)
    return to_json_text(output, indent=2)


def _field(value: Any) -> str:
    """A value printed inside a line: one line, escaped."""
    return printable(str(value), multiline=False)


def print_result(result: RunResult, fmt: str, out: TextIO) -> None:
    if fmt in ("json", "ndjson"):
        out.write(to_json_text(result.to_json()) + "\n")
        return
    usage = result.usage
    tokens = usage.get("consumed_tokens", 0)
    run_id = _field(result.run_id)
    out.write(f"run {run_id}: {result.status.value} (attempt {result.attempt}, "
              f"{tokens} tokens, {usage.get('model_requests', 0)} model requests)\n")
    if result.status.value == "completed":
        out.write("\n" + _output_text(result.output) + "\n")
    elif result.status.value == "suspended" and result.suspension:
        details = result.suspension.get("details", {})
        reason = result.suspension.get("reason")
        out.write(f"suspended for {_field(reason)}")
        if reason == "approval":
            out.write(f": {printable(str(details.get('prompt') or ''))}\n"
                      f"  approve: agent-runtime approve {run_id} --resume\n"
                      f"  reject:  agent-runtime approve {run_id} --reject --resume\n")
        elif reason == "token-budget":
            out.write(f": {_field(details.get('consumed_tokens'))} of "
                      f"{_field(details.get('max_total_tokens'))} tokens used\n"
                      f"  continue: agent-runtime resume {run_id} --max-total-tokens N\n")
        else:
            out.write(f": {to_json_text(details)}\n")
    elif result.error:
        out.write(f"error {_field(result.error.get('type'))}: "
                  f"{_field(result.error.get('message'))}\n")


def print_record(record: RunRecord, checkpoints: list[CheckpointInfo] | None, fmt: str,
                 out: TextIO) -> None:
    if fmt == "json":
        body = record.model_dump(mode="json")
        if checkpoints is not None:
            body["checkpoints"] = [info.model_dump(mode="json") for info in checkpoints]
        out.write(to_json_text(body, indent=2) + "\n")
        return
    rows = [
        ("run", record.run_id),
        ("status", record.status.value),
        ("attempt", str(record.attempt)),
        ("manifest", f"{record.manifest.get('id') or record.manifest.get('name') or '-'} "
                     f"({record.manifest_hash})"),
        ("created", record.created_at.isoformat()),
        ("updated", record.updated_at.isoformat()),
        ("checkpoint", str(record.checkpoint_seq) if record.checkpoint_seq else "none"),
        ("tokens", str(record.consumed_tokens)
         + (f" of {record.budget.max_total_tokens}" if record.budget.max_total_tokens else "")),
    ]
    if record.lease_owner:
        expires = record.lease_expires_at.isoformat() if record.lease_expires_at else "?"
        rows.append(("lease", f"{record.lease_owner} until {expires}"))
    if record.parent:
        rows.append(("parent", f"{record.parent.run_id} at {record.parent.step_path}"))
    if record.suspension:
        rows.append(("suspension", f"{record.suspension.reason} "
                                   f"{to_json_text(record.suspension.details)}"))
        if record.suspension.decision:
            rows.append(("decision", to_json_text(record.suspension.decision)))
    if record.error:
        rows.append(("error", f"{record.error.type}: {record.error.message}"))
    if record.options:
        rows.append(("options", to_json_text(record.options)))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        out.write(f"{name.ljust(width)}  {_field(value)}\n")
    if record.status.value == "completed":
        out.write("output\n" + _output_text(record.output) + "\n")
    if checkpoints is not None:
        out.write(f"\ncheckpoints ({len(checkpoints)})\n")
        out.write("  seq  attempt  bytes  created\n")
        for info in checkpoints:
            out.write(f"  {info.seq:>3}  {info.attempt:>7}  {info.size_bytes:>5}  "
                      f"{info.created_at.isoformat()}\n")


def print_runs(runs: list[RunRecord], fmt: str, out: TextIO) -> None:
    if fmt == "json":
        out.write(to_json_text([{
            "run_id": run.run_id, "status": run.status.value, "attempt": run.attempt,
            "manifest_id": run.manifest.get("id"), "updated_at": run.updated_at.isoformat(),
        } for run in runs], indent=2) + "\n")
        return
    if not runs:
        out.write("no runs\n")
        return
    out.write(f"{'run':<26} {'status':<10} {'attempt':>7}  {'agent':<20} updated\n")
    for run in runs:
        agent = _field(str(run.manifest.get("id") or run.manifest.get("name") or "-")[:20])
        out.write(f"{_field(run.run_id):<26} {run.status.value:<10} {run.attempt:>7}  {agent:<20} "
                  f"{run.updated_at.isoformat(timespec='seconds')}\n")


def print_event(event: Event, fmt: str, out: TextIO) -> None:
    if fmt in ("json", "ndjson"):
        out.write(to_json_text(event.to_json()) + "\n")
    else:
        # an event log is a file anyone may hand to `events`: escape all of it
        where = f" {event.step_path}" if event.step_path else ""
        data = f" {to_json_text(event.data)}" if event.data else ""
        out.write(_field(f"{event.timestamp.isoformat(timespec='milliseconds')} {event.run_id} "
                         f"a{event.attempt}#{event.sequence} {event.type}{where}{data}") + "\n")
    out.flush()


def print_effects(effects: list[EffectRecord], fmt: str, out: TextIO) -> None:
    if fmt in ("json", "ndjson"):
        out.write(to_json_text([effect.model_dump(mode="json") for effect in effects],
                               indent=2) + "\n")
        return
    if not effects:
        out.write("no effects\n")
        return
    out.write(f"{'key':<34} {'status':<10} {'attempt':>7}  result\n")
    for effect in effects:
        result = "" if effect.result is None else to_json_text(effect.result)
        if len(result) > 60:
            result = result[:57] + "..."
        out.write(f"{_field(effect.key):<34} {effect.status.value:<10} {effect.attempt:>7}  "
                  f"{_field(result)}\n")


def print_reconcile_summary(summary: ReconcileSummary, fmt: str, out: TextIO) -> None:
    """`json`: one object per pass on one line; `pretty`: a line per run and the counts."""
    if fmt == "json":
        out.write(to_json_text(summary.to_json()) + "\n")
    else:
        for outcome in summary.outcomes:
            out.write(_reconciled(outcome) + "\n")
        counts = summary.counts()
        out.write(f"reconcile: {counts['candidates']} candidates, {counts['resumed']} resumed, "
                  f"{counts['skipped']} skipped, {counts['failed_runs']} failed, "
                  f"{counts['errors']} errors\n")
    out.flush()


def _reconciled(outcome: RunOutcome) -> str:
    run, detail = _field(outcome.run_id), _field(outcome.detail)
    if outcome.action is Action.RESUMED:
        if outcome.status is None:
            return f"resumed {run}: attempt {outcome.attempt} started ({detail})"
        return f"resumed {run}: attempt {outcome.attempt} ended {outcome.status.value}"
    if outcome.action is Action.SKIPPED:
        return f"skipped {run}: {outcome.reason} ({detail})"
    if outcome.action is Action.FAILED_RUN:
        return f"failed {run}: crash_loop: {detail}"
    return f"error {run}: {detail}"
