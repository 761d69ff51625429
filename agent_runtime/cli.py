"""The `agent-runtime` command.

Exit codes: 0 completed, 10 suspended, 1 failed or cancelled (or a store
error), 2 invalid input (the message names the file, the field and the
reason), 3 not found, 4 conflict; see `agent_runtime.cli_errors`. Input is
checked before anything is opened: a refused command creates nothing on disk.
A run remembers its runtime options (`--config`, `--model`, `--tools`);
`resume` and `approve --resume` reuse them unless given again.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from stores import DRIVERS
from stores.base import RunStore, StoreError
from stores.records import RunRecord, RunStatus

from agent_runtime.cli_errors import (
    EXIT_COMPLETED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_SUSPENDED,
    report_error,
)
from agent_runtime.cli_events import cmd_events
from agent_runtime.cli_gc import add_gc_parser, cmd_gc
from agent_runtime.cli_options import (
    DEFAULT_ARTIFACTS,
    DEFAULT_EVENTS,
    DEFAULT_STORE,
    budget_from,
    build_runtime,
    check_output_file,
    check_run_id,
    check_sinks,
    check_text_flags,
    count,
    load_tools,
    open_run_store,
    parse_json_option,
    run_options,
    runtime_config,
    seconds,
)
from agent_runtime.cli_serve import add_serve_parser, cmd_serve
from agent_runtime.engine import AgentRuntime
from agent_runtime.errors import Conflict, InvalidInput, ManifestError, NotFound
from agent_runtime.events import EventSink, JsonlEventSink
from agent_runtime.excerpts import excerpt, printable
from agent_runtime.execution_plan import plan_json, print_plan
from agent_runtime.limits import DEFAULT_LIMITS, reset_limits, set_limits
from agent_runtime.manifest import manifest_hash
from agent_runtime.manifest_input import quote
from agent_runtime.reconcile import (
    DEFAULT_MAX_TAKEOVERS,
    DEFAULT_RESUME_GRACE_SECONDS,
    Reconciler,
)
from agent_runtime.reports import (
    print_effects,
    print_reconcile_summary,
    print_record,
    print_result,
    print_runs,
    to_json_text,
)
from agent_runtime.results import RunResult
from agent_runtime.run_manifest import LoadedManifest, load_manifest_file
from agent_runtime.variables import read_variables_option, resolve_variables


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error reported as any invalid input is: one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        raise InvalidInput(f"{message} (see {self.prog} --help)", source=self.prog)


def _store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store-driver", choices=DRIVERS, default="sqlite",
                        help="where runs live (default: sqlite)")
    parser.add_argument("--store", metavar="LOCATION",
                        help=f"the store's file or directory (default: {DEFAULT_STORE})")


def _execution_flags(parser: argparse.ArgumentParser) -> None:
    _store_flags(parser)
    parser.add_argument("--max-total-tokens", type=count(1), metavar="N",
                        help="token budget across all attempts")
    parser.add_argument("--config", metavar="FILE", help="runtime config (providers, models)")
    parser.add_argument("--model", metavar="PROVIDER/MODEL",
                        help="use this model for every step (e.g. scripted/echo)")
    parser.add_argument("--tools", metavar="FILE.py", action="append",
                        help="import @agent_runtime.tool functions from a file (repeatable)")
    parser.add_argument("--events", metavar="FILE|none", default=DEFAULT_EVENTS,
                        help=f"JSONL event log (default: {DEFAULT_EVENTS})")
    parser.add_argument("--artifacts", metavar="DIR|none", default=DEFAULT_ARTIFACTS,
                        help=f"where tools' artifacts are kept (default: {DEFAULT_ARTIFACTS})")
    parser.add_argument("--lease-seconds", type=seconds, default=30.0, metavar="S",
                        help="lease length; renewed at every checkpoint (default: 30)")
    parser.add_argument("--stream", action="store_true", help="show a live view of the run")
    parser.add_argument("--format", choices=("pretty", "json", "ndjson"), default="pretty")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="agent-runtime", description="A durable runtime for LLM agent runs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser("validate", help="check an agent or run manifest")
    validate.add_argument("file")
    validate.add_argument("--config", metavar="FILE")
    validate.add_argument("--model", metavar="PROVIDER/MODEL")
    validate.add_argument("--tools", metavar="FILE.py", action="append")
    validate.add_argument("--format", choices=("pretty", "json"), default="pretty")
    validate.add_argument("--plan", action="store_true",
                          help="also show the waves the steps run in (execution.mode)")

    run = commands.add_parser("run", help="start a run of a manifest")
    run.add_argument("file")
    run.add_argument("--variables", metavar="JSON|@FILE",
                     help="variable overrides as a JSON object, or @file (JSON or YAML)")
    run.add_argument("--run-id", metavar="ID")
    _execution_flags(run)

    resume = commands.add_parser("resume", help="continue a run from its latest checkpoint")
    resume.add_argument("run_id")
    resume.add_argument("--allow-running-takeover", action="store_true",
                        help="take over a run whose owner died (only once its lease expired)")
    _execution_flags(resume)

    approve = commands.add_parser("approve", help="answer the approval a run waits for")
    approve.add_argument("run_id")
    approve.add_argument("--reject", action="store_true", help="reject instead of approve")
    approve.add_argument("--response", metavar="JSON", help="a JSON value to record")
    approve.add_argument("--by", metavar="NAME", help="who answers")
    approve.add_argument("--resume", action="store_true", help="resume the run afterwards")
    _execution_flags(approve)

    effects = commands.add_parser(
        "effects", help="list a run's tool-call effects, or settle one whose outcome is unknown",
        description="agent-runtime effects RUN_ID | agent-runtime effects resolve RUN_ID KEY "
                    "(--retry | --result JSON | --skip)")
    effects.add_argument("words", nargs="+", metavar="RUN_ID | resolve RUN_ID KEY")
    settle = effects.add_mutually_exclusive_group()
    settle.add_argument("--retry", action="store_true", help="call the tool again, same key")
    settle.add_argument("--result", metavar="JSON", help="record this as the call's result")
    settle.add_argument("--skip", action="store_true", help="tell the model the call was skipped")
    _execution_flags(effects)

    fork = commands.add_parser("fork", help="start a new run from a saved checkpoint")
    fork.add_argument("run_id")
    fork.add_argument("--seq", type=count(1), metavar="N",
                      help="the checkpoint (default: latest)")
    fork.add_argument("--run-id", dest="new_run_id", metavar="ID", help="the new run's id")
    _execution_flags(fork)

    cancel = commands.add_parser("cancel", help="cancel a run")
    cancel.add_argument("run_id")
    _store_flags(cancel)

    inspect = commands.add_parser("inspect", help="show a run")
    inspect.add_argument("run_id")
    inspect.add_argument("--checkpoints", action="store_true", help="list its checkpoints")
    inspect.add_argument("--format", choices=("pretty", "json"), default="pretty")
    _store_flags(inspect)

    listing = commands.add_parser("list", help="list runs")
    listing.add_argument("--status", action="append", choices=[s.value for s in RunStatus])
    listing.add_argument("--limit", type=count(1), default=100)
    listing.add_argument("--format", choices=("pretty", "json"), default="pretty")
    _store_flags(listing)

    events = commands.add_parser("events", help="print events from a JSONL event log")
    events.add_argument("file", nargs="?", default=DEFAULT_EVENTS)
    events.add_argument("--run", metavar="RUN_ID")
    events.add_argument("--type", metavar="TYPE", help="an event type or prefix (model.*)")
    events.add_argument("--tail", action="store_true", help="keep following the file")
    events.add_argument("--format", choices=("pretty", "ndjson"), default="pretty")

    reconcile = commands.add_parser(
        "reconcile", help="resume runs whose owner died; fail runs that keep dying")
    passes = reconcile.add_mutually_exclusive_group()
    passes.add_argument("--once", action="store_true", help="one pass, then exit (the default)")
    passes.add_argument("--interval", type=seconds, metavar="SECONDS",
                        help="a pass every SECONDS until interrupted")
    reconcile.add_argument("--max-takeovers", type=count(0), default=DEFAULT_MAX_TAKEOVERS,
                           metavar="N", help="fail a run that died again after N takeovers "
                           f"instead of resuming it (default: {DEFAULT_MAX_TAKEOVERS})")
    reconcile.add_argument("--resume-grace", type=seconds,
                           default=DEFAULT_RESUME_GRACE_SECONDS, metavar="SECONDS",
                           help="resume a suspended run whose resume was requested (or whose "
                           "sub-run finished) at least this long ago "
                           f"(default: {DEFAULT_RESUME_GRACE_SECONDS:g})")
    reconcile.add_argument("--lease-seconds", type=seconds, default=30.0, metavar="S",
                           help="lease of the runs it resumes (default: 30)")
    reconcile.add_argument("--events", metavar="FILE|none", default=DEFAULT_EVENTS,
                           help=f"JSONL event log (default: {DEFAULT_EVENTS})")
    reconcile.add_argument("--format", choices=("pretty", "json"), default="pretty")
    _store_flags(reconcile)

    add_serve_parser(commands, _store_flags)
    add_gc_parser(commands, _store_flags)
    return parser


@functools.cache
def _parser() -> argparse.ArgumentParser:
    # Built once per process: building it takes longer than validating a small
    # manifest, and tests call `main` thousands of times in one process.
    return build_parser()


# -- options ----------------------------------------------------------------


def _exit_code(result: RunResult) -> int:
    if result.status is RunStatus.COMPLETED:
        return EXIT_COMPLETED
    if result.status is RunStatus.SUSPENDED:
        return EXIT_SUSPENDED
    return EXIT_FAILED


# -- commands ---------------------------------------------------------------


def _load_manifest(file: str) -> LoadedManifest:
    try:
        loaded = load_manifest_file(file)
    except OSError as error:  # a run manifest's agent.ref no file system can name
        raise ManifestError(f"cannot read the agent manifest: {error.strerror or error}",
                            source=file, field="agent.ref") from None
    if loaded.run is not None and loaded.run.run_id is not None:
        check_run_id(loaded.run.run_id, source=f"{file}: runId")
    return loaded


def cmd_validate(args: argparse.Namespace) -> int:
    options = run_options(args) if args.config or args.model or args.tools else None
    config = runtime_config(options) if options else None  # its limits apply from here
    loaded = _load_manifest(args.file)
    if loaded.run is not None:
        overrides = {item.key: item.value for item in loaded.run.variables or []}
        resolve_variables(loaded.agent, overrides, source=str(loaded.path))
    if options is not None:
        AgentRuntime(config=config, tools=load_tools(options, config)).check_runnable(
            loaded.agent, options, source=str(loaded.agent_path))
    summary = {"file": str(loaded.path), "valid": True, "kind": "run" if loaded.run else "agent",
               "agent": loaded.agent.id or loaded.agent.name,
               "steps": len(loaded.agent.steps), "manifest_hash": manifest_hash(loaded.agent)}
    plan = plan_json(loaded, config) if args.plan else None
    if plan is not None:
        summary["plan"] = plan
    if args.format == "json":
        print(to_json_text(summary))
    else:
        print(printable(f"ok: {summary['file']} ({summary['kind']} manifest, agent "
                        f"{summary['agent'] or '-'}, {summary['steps']} top-level steps, "
                        f"{summary['manifest_hash']})", multiline=False))
        if plan is not None:
            print_plan(plan, sys.stdout)
    return EXIT_COMPLETED


def _finish(result: RunResult, args: argparse.Namespace) -> int:
    print_result(result, args.format, sys.stdout)
    return _exit_code(result)


def cmd_run(args: argparse.Namespace) -> int:
    options = run_options(args)
    config = runtime_config(options)  # its limits apply to everything read below
    loaded = _load_manifest(args.file)
    variables, variables_source = (None, "--variables") if args.variables is None \
        else read_variables_option(args.variables)
    if args.run_id is not None:
        check_run_id(args.run_id, source="--run-id")
    options["manifest_path"] = str(loaded.path.resolve())
    # A run manifest names its agent by a path of its own: sub-run manifestRefs
    # resolve next to the agent manifest, wherever the run manifest is.
    options["manifest_dir"] = str(loaded.agent_path.resolve().parent)
    tools = load_tools(options, config)
    # The whole run is checked before a store or a log is opened, so refused
    # input leaves nothing behind.
    record, _ = AgentRuntime(config=config, tools=tools).new_run(
        manifest=loaded, variables=variables, budget=budget_from(args), run_id=args.run_id,
        options=options, variables_source=variables_source)
    check_sinks(args)
    with open_run_store(args) as store:
        if (args.run_id or (loaded.run and loaded.run.run_id)) and \
                store.load_run(record.run_id) is not None:
            raise Conflict(f"a run with id {excerpt(record.run_id)} already exists",
                           source="--run-id")
        runtime, files = build_runtime(args, store, options, prepared=(config, tools))
        try:
            result = runtime.run_sync(manifest=loaded, variables=variables,
                                      budget=budget_from(args), run_id=args.run_id,
                                      options=options)
        finally:
            for sink in files:
                sink.close()
    return _finish(result, args)


def _load(store: RunStore, run_id: str) -> RunRecord:
    record = store.load_run(check_run_id(run_id, source="RUN_ID"))
    if record is None:
        raise NotFound(f"no run with id {excerpt(run_id)} in this store", source="RUN_ID")
    return record


def _resume(args: argparse.Namespace, store: RunStore, record: RunRecord,
            effect_resolutions: dict[str, dict[str, Any]] | None = None) -> int:
    options = run_options(args, record.options)
    runtime, files = build_runtime(args, store, options)
    manifest_path = options.get("manifest_path")
    manifest = manifest_path if manifest_path and Path(manifest_path).is_file() else None
    try:
        result = runtime.run_sync(run_id=record.run_id, resume=True, manifest=manifest,
                                  budget=budget_from(args),
                                  allow_running_takeover=getattr(args, "allow_running_takeover",
                                                                 False),
                                  effect_resolutions=effect_resolutions)
    finally:
        for sink in files:
            sink.close()
    return _finish(result, args)


def _check_runtime_flags(args: argparse.Namespace) -> None:
    """`--model`, `--tools`, `--config` and the sinks of a command that resumes a run,
    checked before the store is opened or anything in it is changed."""
    runtime_config(run_options(args))
    check_sinks(args)


def cmd_resume(args: argparse.Namespace) -> int:
    check_run_id(args.run_id, source="RUN_ID")
    _check_runtime_flags(args)
    with open_run_store(args, create=False) as store:
        return _resume(args, store, _load(store, args.run_id))


def cmd_approve(args: argparse.Namespace) -> int:
    response = None
    if args.response is not None:
        response = parse_json_option(args.response, source="--response")
    if args.by is not None and (not args.by.isprintable() or len(args.by) > 200):
        raise InvalidInput("must be a name: printable, at most 200 characters", source="--by")
    check_run_id(args.run_id, source="RUN_ID")
    _check_runtime_flags(args)
    with open_run_store(args, create=False) as store:
        record = _load(store, args.run_id)
        approval_id = AgentRuntime(store=store).approve(
            args.run_id, approved=not args.reject, response=response, responded_by=args.by)
        verdict = "rejected" if args.reject else "approved"
        print(printable(f"{verdict} {approval_id} of run {args.run_id}", multiline=False),
              file=sys.stderr)
        if not args.resume:
            return EXIT_COMPLETED
        return _resume(args, store, _load(store, record.run_id))


def cmd_effects(args: argparse.Namespace) -> int:
    words = args.words
    if words[0] != "resolve":
        if len(words) != 1:
            raise InvalidInput("expected RUN_ID, or resolve RUN_ID KEY", source="effects")
        with open_run_store(args, create=False) as store:
            _load(store, words[0])
            print_effects(store.list_effects(words[0]), args.format, sys.stdout)
        return EXIT_COMPLETED
    if len(words) != 3:
        raise InvalidInput("expected resolve RUN_ID KEY", source="effects")
    run_id, key = check_run_id(words[1], source="RUN_ID"), words[2]
    if args.retry:
        resolution: dict[str, Any] = {"action": "retry"}
    elif args.skip:
        resolution = {"action": "skip"}
    elif args.result is not None:
        resolution = {"action": "result",
                      "result": parse_json_option(args.result, source="--result")}
    else:
        raise InvalidInput("say how to settle it: --retry, --result JSON or --skip",
                           source="effects resolve")
    _check_runtime_flags(args)
    with open_run_store(args, create=False) as store:
        record = _load(store, run_id)
        suspension = record.suspension
        if record.status is not RunStatus.SUSPENDED or suspension is None \
                or suspension.reason != "effect-unknown" or suspension.details.get("key") != key:
            raise InvalidInput(f"run {quote(run_id)} is not waiting on effect {quote(key)} "
                               f"(it is {record.status.value})", source="effects resolve")
        return _resume(args, store, record, effect_resolutions={key: resolution})


def cmd_fork(args: argparse.Namespace) -> int:
    check_run_id(args.run_id, source="RUN_ID")
    if args.new_run_id is not None:
        check_run_id(args.new_run_id, source="--run-id")
    _check_runtime_flags(args)
    with open_run_store(args, create=False) as store:
        record = _load(store, args.run_id)
        options = run_options(args, record.options)
        runtime, files = build_runtime(args, store, options)
        try:
            result = asyncio.run(runtime.fork(args.run_id, seq=args.seq,
                                              new_run_id=args.new_run_id, budget=budget_from(args)))
        finally:
            for sink in files:
                sink.close()
    return _finish(result, args)


def cmd_cancel(args: argparse.Namespace) -> int:
    with open_run_store(args, create=False) as store:
        _load(store, args.run_id)
        AgentRuntime(store=store).cancel(args.run_id)
        print(printable(f"cancelled run {args.run_id}", multiline=False))
    return EXIT_COMPLETED


def cmd_inspect(args: argparse.Namespace) -> int:
    with open_run_store(args, create=False) as store:
        record = _load(store, args.run_id)
        checkpoints = store.list_checkpoints(args.run_id) if args.checkpoints else None
        print_record(record, checkpoints, args.format, sys.stdout)
    return EXIT_COMPLETED


def cmd_list(args: argparse.Namespace) -> int:
    with open_run_store(args, create=False) as store:
        runs: list[RunRecord] = []
        cursor = None
        while len(runs) < args.limit:
            page = store.list_runs(statuses=args.status, limit=min(100, args.limit - len(runs)),
                                   cursor=cursor)
            runs.extend(page.runs)
            cursor = page.cursor
            if cursor is None:
                break
        print_runs(runs, args.format, sys.stdout)
    return EXIT_COMPLETED


def cmd_reconcile(args: argparse.Namespace) -> int:
    if args.events != "none":
        check_output_file(args.events, flag="--events")
    log = None if args.events == "none" else JsonlEventSink(args.events)
    sinks: list[EventSink] = [log] if log else []
    # Resumed runs write to the command's event log, with their remembered options.
    run_args = argparse.Namespace(events="none", artifacts=DEFAULT_ARTIFACTS,
                                  lease_seconds=args.lease_seconds)
    try:
        with open_run_store(args) as store:
            reconciler = Reconciler(
                store, max_takeovers=args.max_takeovers, resume_grace=args.resume_grace,
                event_sinks=sinks, runtime_for=lambda record: build_runtime(run_args, store,
                                                    run_options(run_args, record.options),
                                                    extra_sinks=sinks)[0])
            if args.interval is None:
                summary = reconciler.reconcile_sync()
                print_reconcile_summary(summary, args.format, sys.stdout)
                return EXIT_FAILED if summary.errors else EXIT_COMPLETED
            try:
                reconciler.reconcile_every(args.interval, lambda summary: print_reconcile_summary(
                    summary, args.format, sys.stdout))
            except KeyboardInterrupt:
                print("reconcile: interrupted; a run it was resuming keeps its latest checkpoint "
                      "for the next pass", file=sys.stderr)
                return EXIT_COMPLETED
    finally:
        if log is not None:
            log.close()


COMMANDS = {"validate": cmd_validate, "run": cmd_run, "resume": cmd_resume,
            "approve": cmd_approve, "cancel": cmd_cancel, "effects": cmd_effects,
            "fork": cmd_fork, "inspect": cmd_inspect,
            "list": cmd_list, "events": cmd_events, "reconcile": cmd_reconcile,
            "serve": cmd_serve, "gc": cmd_gc}


def main(argv: Sequence[str] | None = None) -> int:
    # The limits in effect start as the defaults; a runtime config read on the
    # way replaces them for this command only.
    token = set_limits(DEFAULT_LIMITS)
    args: argparse.Namespace | None = None
    try:
        args = _parser().parse_args(argv)
        check_text_flags(args)
        return COMMANDS[args.command](args)
    except (InvalidInput, StoreError, OSError) as error:
        return report_error(error, args)
    except KeyboardInterrupt:
        print("interrupted; the run keeps its latest checkpoint — continue it with "
              "`agent-runtime resume RUN_ID --allow-running-takeover` once its lease expires",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        reset_limits(token)


if __name__ == "__main__":
    sys.exit(main())

