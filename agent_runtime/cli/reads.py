"""The CLI commands that only read a store: list, inspect, effects (docs/design.md section 9).

They never create a store: a missing one is exit 3 naming it. `list` is
newest first (run ids are time-ordered) and says, with the cursor to pass,
when more rows exist; `inspect RUN` shows the run and its latest checkpoint's
state (its variables, briefly; with `--format json` whole, with its step
results);
`inspect --checkpoints` adds the run's timeline (step path, kind, time and
tokens per checkpoint); `inspect RUN --seq N --state` shows one checkpoint's
variables and step results; `effects RUN` names the
tool and the step of every effect key.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from stores.base import RunStore
from stores.records import Checkpoint, EffectRecord, RunRecord

from agent_runtime.cli.errors import EXIT_COMPLETED
from agent_runtime.cli.options import check_run_id, open_run_store
from agent_runtime.cli.output import STATUS_COLOURS, guarded, paint
from agent_runtime.cli.reports import TimelineEntry, print_record, to_json_text
from agent_runtime.cli.runs import load_run
from agent_runtime.cli.store import store_flags_text
from agent_runtime.effect_owners import EffectOwner, effect_owners, owner_of
from agent_runtime.errors import InvalidInput, NotFound
from agent_runtime.excerpts import printable


def _field(value: Any) -> str:
    return printable(str(value), multiline=False)


# -- list -----------------------------------------------------------------------


def _duration(run: RunRecord) -> str:
    if not run.status.terminal:
        return "-"
    seconds = max(0.0, (run.updated_at - run.created_at).total_seconds())
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def print_runs(runs: list[RunRecord], cursor: str | None, fmt: str, out: TextIO,
               more_command: str) -> None:
    if fmt == "json":
        out.write(to_json_text({"runs": [{
            "run_id": run.run_id, "status": run.status.value, "attempt": run.attempt,
            "manifest_id": run.manifest.get("id"), "created_at": run.created_at.isoformat(),
            "updated_at": run.updated_at.isoformat(), "consumed_tokens": run.consumed_tokens,
            "suspension": None if run.suspension is None or run.status.value != "suspended"
            else run.suspension.reason,
        } for run in runs], "cursor": cursor}, indent=2) + "\n")
        return
    if not runs:
        out.write("no runs\n")
        return
    out.write(paint(out, f"{'run':<40} {'created':<19} {'status':<22} {'tokens':>8} "
                         f"{'duration':>9}  agent", "bold") + "\n")
    for run in runs:
        status = run.status.value
        if status == "suspended" and run.suspension is not None:
            status += f" ({run.suspension.reason})"
        agent = _field(str(run.manifest.get("id") or run.manifest.get("name") or "-")[:24])
        shown = paint(out, f"{_field(status)[:22]:<22}", STATUS_COLOURS.get(run.status.value, ""))
        out.write(f"{_field(run.run_id):<40} "
                  f"{run.created_at.isoformat(timespec='seconds')[:19]:<19} {shown} "
                  f"{run.consumed_tokens:>8} {_duration(run):>9}  {agent}\n")
    if cursor is not None:
        out.write(paint(out, f"more runs: {more_command} --cursor {cursor}", "dim") + "\n")


def cmd_list(args: argparse.Namespace) -> int:
    with open_run_store(args, create=False) as store:
        page = store.list_runs(statuses=args.status, agent=args.agent,
                               run_id_prefix=args.id_prefix, created_after=args.since,
                               created_before=args.until, newest_first=True, limit=args.limit,
                               cursor=args.cursor)
        search = [(flag, value) for flag, value in (
            ("--agent", args.agent), ("--id-prefix", args.id_prefix),
            ("--since", args.since and args.since.isoformat()),
            ("--until", args.until and args.until.isoformat())) if value is not None]
        more = "agent-runtime list" + "".join(f" --status {s}" for s in args.status or []) \
            + "".join(f" {flag} {shlex.quote(value)}" for flag, value in search) \
            + (f" --limit {args.limit}" if args.limit != args.default_limit else "") \
            + store_flags_text(args)
        print_runs(page.runs, page.cursor, args.format, guarded(sys.stdout), more)
    return EXIT_COMPLETED


# -- inspect --------------------------------------------------------------------


def _step_kinds(steps: Any, kinds: dict[str, str]) -> dict[str, str]:
    """Step id -> type over the stored manifest JSON, nested steps included."""
    for step in steps if isinstance(steps, list) else []:
        if isinstance(step, dict) and isinstance(step.get("id"), str):
            kinds.setdefault(step["id"], str(step.get("type", "?")))
            _step_kinds(step.get("steps"), kinds)
    return kinds


def _where(checkpoint: Checkpoint) -> tuple[str, str]:
    """(step path, step id) of what the checkpoint saved: the step in progress when the
    innermost frame has state of its own (a prompt between tool calls), else the step
    that just finished."""
    named = [frame for frame in checkpoint.cursor if frame.step_id]
    if named and named[-1].continuation:
        return named[-1].step_path, named[-1].step_id
    if checkpoint.step_results:
        last = checkpoint.step_results[-1]
        return str(last.get("step_path", "-")), str(last.get("step_id", ""))
    return (named[-1].step_path, named[-1].step_id) if named else ("(start)", "")


def timeline(store: RunStore, record: RunRecord) -> Iterator[TimelineEntry]:
    kinds = _step_kinds(record.manifest.get("steps"), {})
    infos = store.list_checkpoints(record.run_id)
    # Every checkpoint in one read: loading them one by one refolds the run each time.
    loaded = {checkpoint.seq: checkpoint for checkpoint in
              store.load_checkpoints(record.run_id, 1, infos[-1].seq)} if infos else {}
    for info in infos:
        checkpoint = loaded.get(info.seq)
        if checkpoint is None:
            continue
        path, step_id = _where(checkpoint)
        yield TimelineEntry(seq=info.seq, attempt=info.attempt, created_at=info.created_at,
                            size_bytes=info.size_bytes, step_path=path,
                            kind=kinds.get(step_id, "-"),
                            tokens=checkpoint.budget.consumed_tokens)


def checkpoint_state(checkpoint: Checkpoint) -> dict[str, Any]:
    """What a checkpoint holds for a reader: where it stood, its variables and results."""
    return {"run_id": checkpoint.run_id, "seq": checkpoint.seq, "attempt": checkpoint.attempt,
            "created_at": checkpoint.created_at.isoformat(),
            "step_path": _where(checkpoint)[0], "variables": checkpoint.variables,
            "step_results": checkpoint.step_results,
            "consumed_tokens": checkpoint.budget.consumed_tokens}


def _print_state(checkpoint: Checkpoint, fmt: str, out: TextIO) -> None:
    body = checkpoint_state(checkpoint)
    if fmt == "json":
        out.write(to_json_text(body, indent=2) + "\n")
        return
    out.write(f"run {_field(checkpoint.run_id)} checkpoint {checkpoint.seq} (attempt "
              f"{checkpoint.attempt}, {checkpoint.created_at.isoformat(timespec='seconds')}, "
              f"at {_field(body['step_path'])}, {checkpoint.budget.consumed_tokens} tokens)\n")
    out.write(paint(out, "variables", "bold") + "\n"
              + to_json_text(checkpoint.variables, indent=2) + "\n")
    out.write(paint(out, "step results", "bold") + "\n"
              + to_json_text(checkpoint.step_results, indent=2) + "\n")


def cmd_inspect(args: argparse.Namespace) -> int:
    check_run_id(args.run_id, source="RUN_ID")
    if args.state and args.seq is None:
        raise InvalidInput("--state shows one checkpoint: give --seq N", source="--state")
    with open_run_store(args, create=False) as store:
        record = load_run(store, args.run_id, args)
        out = guarded(sys.stdout)
        if args.seq is not None:
            checkpoint = store.load_checkpoint(args.run_id, args.seq)
            if checkpoint is None:
                raise NotFound(f"run {args.run_id} has no checkpoint {args.seq} (it has "
                               f"1 to {record.checkpoint_seq})", source="--seq")
            _print_state(checkpoint, args.format, out)
            return EXIT_COMPLETED
        entries = list(timeline(store, record)) if args.checkpoints else None
        # As the reference's `inspect` does: the run and its latest checkpoint's state.
        latest = store.load_latest_checkpoint(args.run_id)
        print_record(record, entries, args.format, out,
                     latest=None if latest is None else checkpoint_state(latest))
    return EXIT_COMPLETED


# -- effects --------------------------------------------------------------------


def print_effects(effects: list[EffectRecord], owners: dict[str, EffectOwner], run_id: str,
                  fmt: str, out: TextIO) -> None:
    def owner(key: str) -> tuple[str, str]:
        tool, step_path = owner_of(key, owners, run_id)
        return (tool or "-", step_path or "-")

    if fmt in ("json", "ndjson"):
        out.write(to_json_text([{**effect.model_dump(mode="json"), "tool": owner(effect.key)[0],
                                 "step_path": owner(effect.key)[1]} for effect in effects],
                               indent=2) + "\n")
        return
    if not effects:
        out.write("no effects\n")
        return
    out.write(paint(out, f"{'key':<34} {'tool':<20} {'step':<24} {'status':<10} {'attempt':>7}"
                         "  result", "bold") + "\n")
    for effect in effects:
        tool, step = owner(effect.key)
        result = "" if effect.result is None else to_json_text(effect.result)
        if len(result) > 60:
            result = result[:57] + "..."
        status = paint(out, f"{effect.status.value:<10}",
                       "green" if effect.status.value == "completed" else "yellow")
        out.write(f"{_field(effect.key):<34} {_field(tool)[:20]:<20} {_field(step)[:24]:<24} "
                  f"{status} {effect.attempt:>7}  {_field(result)}\n")


def cmd_effects(args: argparse.Namespace) -> int:
    words = args.words
    if words[0] == "resolve":
        if len(words) != 3:
            raise InvalidInput("expected resolve RUN_ID KEY", source="effects")
        from agent_runtime.cli.runs import cmd_effects_resolve  # noqa: PLC0415

        return cmd_effects_resolve(args, words[1], words[2])
    if len(words) != 1:
        raise InvalidInput("expected RUN_ID, or resolve RUN_ID KEY", source="effects")
    check_run_id(words[0], source="RUN_ID")
    with open_run_store(args, create=False) as store:
        record = load_run(store, words[0], args)
        print_effects(store.list_effects(words[0]), effect_owners(store, record), words[0],
                      args.format, guarded(sys.stdout))
    return EXIT_COMPLETED
