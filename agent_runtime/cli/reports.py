"""What the CLI prints: run results, records, checkpoints, lists and events.

`--format json` prints one object `{run_id, status, attempt, output,
suspension, usage}`; `pretty` is for people; `ndjson` streams events as JSON
lines and ends with the result object. With `--ndjson-shape reference`, the
lines are the reference CLI's instead: `{"type": "event", "event": {...}}` and
a last `{"type": "result", "result": {...}}`, their fields camelCased (never
inside a run's output or variables, which are the run's own data).

Run outputs, ids, prompts and messages may hold whatever a model or a user
wrote, so nothing reaches the terminal raw: JSON goes through
`escape_json_text` (still the same JSON), everything else through
`printable` (multi-line text keeps its newlines; one-line fields escape them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from pydantic.alias_generators import to_camel

from agent_runtime.cli.output import STATUS_COLOURS, paint
from agent_runtime.events import Event
from agent_runtime.excerpts import escape_json_text, excerpt, printable

if TYPE_CHECKING:  # the reconciler (and the engine) load only for `reconcile`
    from stores.records import RunRecord

    from agent_runtime.reconcile import ReconcileSummary, RunOutcome
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


def print_result(result: RunResult, fmt: str, out: TextIO, *, store_flags: str = "",
                 shape: str = "native") -> None:
    """The result of an execution; next-step hints repeat `store_flags` (the flags
    that name the store, already quoted for a shell)."""
    if fmt == "ndjson" and shape == "reference":
        out.write(to_json_text({"type": "result", "result": camel_fields(result.to_json())})
                  + "\n")
        return
    if fmt in ("json", "ndjson"):
        out.write(to_json_text(result.to_json()) + "\n")
        return
    usage = result.usage
    tokens = usage.get("consumed_tokens", 0)
    run_id = _field(result.run_id)
    status = paint(out, result.status.value, STATUS_COLOURS.get(result.status.value, "bold"))
    out.write(f"run {run_id}: {status} (attempt {result.attempt}, "
              f"{tokens} tokens, {usage.get('model_requests', 0)} model requests)\n")
    flags = _field(store_flags)
    if result.status.value == "completed":
        out.write("\n" + _output_text(result.output) + "\n")
    elif result.status.value == "suspended" and result.suspension:
        details = result.suspension.get("details", {})
        reason = result.suspension.get("reason")
        out.write(f"suspended for {_field(reason)}")
        if reason == "approval":
            out.write(f": {printable(str(details.get('prompt') or ''))}\n"
                      f"  approve: agent-runtime approve {run_id} --resume{flags}\n"
                      f"  reject:  agent-runtime approve {run_id} --reject --resume{flags}\n")
        elif reason == "token-budget":
            out.write(f": {_field(details.get('consumed_tokens'))} of "
                      f"{_field(details.get('max_total_tokens'))} tokens used\n"
                      f"  continue: agent-runtime resume {run_id} --max-total-tokens N{flags}\n")
        elif reason == "interrupted":
            out.write(f" before {_field(details.get('before'))} at "
                      f"{_field(details.get('step_path') or '-')}; what finished is saved\n"
                      f"  continue: agent-runtime resume {run_id}{flags}\n")
        elif reason == "effect-unknown":
            key = _field(details.get("key"))
            out.write(f": tool {_field(details.get('tool'))} at "
                      f"{_field(details.get('step_path'))} may or may not have run\n"
                      f"  settle: agent-runtime effects resolve {run_id} {key} "
                      f"--retry | --result JSON | --skip{flags}\n")
        elif reason == "sub-run":
            out.write(f": waiting on run {_field(details.get('child_run_id'))}\n")
        else:
            out.write(f": {to_json_text(details)}\n")
    elif result.error:
        out.write(f"error {_field(result.error.get('type'))}: "
                  f"{_field(result.error.get('message'))}\n")


@dataclass(frozen=True)
class TimelineEntry:
    """One checkpoint of a run as `inspect --checkpoints` shows it."""

    seq: int
    attempt: int
    created_at: datetime
    size_bytes: int
    step_path: str  # where the cursor stood: the step that just finished or waits
    kind: str  # that step's type
    tokens: int  # consumed so far

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "attempt": self.attempt,
                "created_at": self.created_at.isoformat(), "size_bytes": self.size_bytes,
                "step_path": self.step_path, "kind": self.kind, "tokens": self.tokens}


def print_record(record: RunRecord, checkpoints: list[TimelineEntry] | None, fmt: str,
                 out: TextIO, *, latest: dict[str, Any] | None = None) -> None:
    """A run as `inspect` shows it; `latest` is its latest checkpoint's state (what
    `cli.reads.checkpoint_state` gives), shown after the run (`checkpoint` in JSON)."""
    if fmt == "json":
        body = record.model_dump(mode="json")
        body["checkpoint"] = latest
        if checkpoints is not None:
            body["checkpoints"] = [entry.to_json() for entry in checkpoints]
        out.write(to_json_text(body, indent=2) + "\n")
        return
    rows = [
        ("run", record.run_id),
        ("status", record.status.value + (f" ({record.suspension.reason})"
                                          if record.suspension and record.status.value
                                          == "suspended" else "")),
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
    if latest is not None:
        _print_latest_state(latest, record.run_id, out)
    if checkpoints is not None:
        out.write(f"\ntimeline ({len(checkpoints)} checkpoints)\n")
        out.write(f"  {'seq':>4}  {'attempt':>7}  {'time':<19}  {'tokens':>7}  "
                  f"{'kind':<9} step\n")
        for entry in checkpoints:
            out.write(f"  {entry.seq:>4}  {entry.attempt:>7}  "
                      f"{entry.created_at.isoformat(timespec='seconds')[:19]:<19}  "
                      f"{entry.tokens:>7}  {_field(entry.kind):<9} {_field(entry.step_path)}\n")


_KEY_SHOWN = 40  # characters of a variable's name
_STATE_ROWS = 40  # variables listed by `inspect`; `--seq N --state` shows them all


def _print_latest_state(latest: dict[str, Any], run_id: str, out: TextIO) -> None:
    """The latest checkpoint's variables, one line each, their values as excerpts
    (what a user or a model wrote is quoted briefly here; `--state` shows it whole)."""
    results = len(latest["step_results"])
    out.write(paint(out, f"\nstate at checkpoint {latest['seq']}", "bold")
              + f" (attempt {latest['attempt']}, at {_field(latest['step_path'])}, {results} "
              f"step result{'' if results == 1 else 's'}; in full: agent-runtime inspect "
              f"{_field(run_id)} --seq {latest['seq']} --state)\n")
    variables = latest["variables"]
    names = [_field(name)[:_KEY_SHOWN] for name in list(variables)[:_STATE_ROWS]]
    width = max((len(name) for name in names), default=0)
    for name, value in zip(names, variables.values(), strict=False):
        out.write(f"  {name.ljust(width)}  {excerpt(value)}\n")
    if len(variables) > _STATE_ROWS:
        out.write(f"  ... {len(variables) - _STATE_ROWS} more\n")
    if not variables:
        out.write("  (no variables)\n")


def print_event(event: Event, fmt: str, out: TextIO, *, shape: str = "native") -> None:
    if fmt == "ndjson" and shape == "reference":
        out.write(to_json_text({"type": "event", "event": camel_fields(event.to_json())}) + "\n")
    elif fmt in ("json", "ndjson"):
        out.write(to_json_text(event.to_json()) + "\n")
    else:
        # an event log is a file anyone may hand to `events`: escape all of it
        where = f" {event.step_path}" if event.step_path else ""
        data = f" {to_json_text(event.data)}" if event.data else ""
        out.write(_field(f"{event.timestamp.isoformat(timespec='milliseconds')} {event.run_id} "
                         f"a{event.attempt}#{event.sequence} {event.type}{where}{data}") + "\n")
    out.flush()


# A run's own data: kept as written, whatever its keys.
_OWN_DATA = frozenset({"output", "variables"})


def camel_fields(value: Any, *, own: bool = False) -> Any:
    """`value` with the runtime's snake_case keys camelCased, recursively, except
    inside a run's output or variables."""
    if own:
        return value
    if isinstance(value, dict):
        return {(to_camel(key) if isinstance(key, str) else key):
                camel_fields(item, own=key in _OWN_DATA) for key, item in value.items()}
    if isinstance(value, list):
        return [camel_fields(item) for item in value]
    return value


def print_reconcile_summary(summary: ReconcileSummary, fmt: str, out: TextIO) -> None:
    """`json`: one object per pass on one line; `pretty`: a line per run and the counts."""
    if fmt == "json":
        out.write(to_json_text(summary.to_json()) + "\n")
    else:
        for outcome in summary.outcomes:
            out.write(_reconciled(outcome) + "\n")
        counts = summary.counts()
        out.write(f"reconcile: {counts['candidates']} candidates, {counts['resumed']} resumed, "
                  f"{counts['skipped']} skipped, "
                  f"{counts['suspended_runs']} suspended as crash loops, "
                  f"{counts['errors']} errors\n")
    out.flush()


def _reconciled(outcome: RunOutcome) -> str:
    from agent_runtime.reconcile import Action  # noqa: PLC0415

    run, detail = _field(outcome.run_id), _field(outcome.detail)
    if outcome.action is Action.RESUMED:
        if outcome.status is None:
            return f"resumed {run}: attempt {outcome.attempt} started ({detail})"
        return f"resumed {run}: attempt {outcome.attempt} ended {outcome.status.value}"
    if outcome.action is Action.SKIPPED:
        return f"skipped {run}: {outcome.reason} ({detail})"
    if outcome.action is Action.SUSPENDED_RUN:
        return f"suspended {run}: crash-loop: {detail}"
    return f"error {run}: {detail}"
