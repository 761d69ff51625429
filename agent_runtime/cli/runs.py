"""The CLI commands that execute runs: run, resume, approve, effects resolve, fork, cancel.

Every flag is checked before the store is opened, so a refused command
changes nothing. A run executes under graceful interrupts (`cli.interrupts`)
and writes to streams a closed pipe cannot break (`cli.output`): the run
goes on to its end whatever happens to the terminal.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stores import transitions
from stores.base import RunStore, StoreError
from stores.records import RunRecord, RunStatus, utc_now

from agent_runtime.attempt_reads import existing_run
from agent_runtime.cli.errors import (
    EXIT_COMPLETED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_SUSPENDED,
    store_name,
)
from agent_runtime.cli.flags import tenant_name
from agent_runtime.cli.interrupts import graceful_interrupts
from agent_runtime.cli.options import (
    check_run_id,
    check_sinks,
    load_manifest,
    open_run_store,
    parse_json_option,
    run_options,
    runtime_config,
)
from agent_runtime.cli.output import guarded
from agent_runtime.cli.reports import print_result, to_json_text
from agent_runtime.cli.runtime import budget_from, build_runtime, load_tools
from agent_runtime.cli.store import store_flags_text
from agent_runtime.cli.takeover import owner_status, takeover_refusal
from agent_runtime.document_paths import quote
from agent_runtime.engine import AgentRuntime
from agent_runtime.errors import Conflict, InvalidInput, ManifestError
from agent_runtime.excerpts import excerpt, printable
from agent_runtime.owner_liveness import Liveness
from agent_runtime.results import RunResult
from agent_runtime.run_options import LOCAL_TENANT, TENANT_ENV


def exit_code(result: RunResult) -> int:
    if result.status is RunStatus.COMPLETED:
        return EXIT_COMPLETED
    if result.status is RunStatus.SUSPENDED:
        interrupted = (result.suspension or {}).get("reason") == "interrupted"
        return EXIT_INTERRUPTED if interrupted else EXIT_SUSPENDED
    return EXIT_FAILED


def finish(result: RunResult, args: argparse.Namespace) -> int:
    print_result(result, args.format, guarded(sys.stdout), store_flags=store_flags_text(args),
                 shape=getattr(args, "ndjson_shape", "native"))
    return exit_code(result)


def execute(args: argparse.Namespace, runtime: AgentRuntime, run_id: str | None,
            call: Callable[[], RunResult]) -> RunResult:
    """`call` (one execution of `runtime`) under graceful interrupts."""
    def describe() -> str:
        if run_id is None:
            return "the run keeps its latest checkpoint"
        return ("the run keeps its latest checkpoint; continue it with `agent-runtime resume "
                f"{run_id}{store_flags_text(args)} --allow-running-takeover`")

    with graceful_interrupts(runtime.interrupt, args.grace_seconds, describe=describe):
        return call()


def load_run(store: RunStore, run_id: str, args: argparse.Namespace | None = None) -> RunRecord:
    """The run, or `NotFound` naming the store it is not in."""
    return existing_run(store, check_run_id(run_id, source="RUN_ID"), where=store_name(args),
                        source="RUN_ID")


def recorded_result(record: RunRecord) -> RunResult:
    """What a finished run ended with, as an execution of it would have reported it."""
    return RunResult(run_id=record.run_id, status=record.status, attempt=record.attempt,
                     output=record.output,
                     suspension=None if record.suspension is None
                     or record.status is not RunStatus.SUSPENDED
                     else record.suspension.model_dump(mode="json"),
                     usage={"consumed_tokens": record.consumed_tokens},
                     error=None if record.error is None else record.error.model_dump(mode="json"))


def cmd_run(args: argparse.Namespace) -> int:
    return start_run(args)


def cmd_run_manifest(args: argparse.Namespace) -> int:
    """`run-manifest FILE`: `run` of a run manifest, which holds everything the run takes."""
    given = [flag for flag, value in (("--variables", args.variables), ("--run-id", args.run_id),
                                      ("--max-total-tokens", args.max_total_tokens))
             if value is not None]
    if given:
        raise InvalidInput(f"{' and '.join(given)} cannot be combined with a run manifest: "
                           "declare variables, runId and budget.maxTotalTokens in it (or use "
                           "`agent-runtime run FILE`, which takes them as overrides)",
                           source=given[0])
    return start_run(args, run_manifest=True)


def start_run(args: argparse.Namespace, *, run_manifest: bool = False) -> int:
    """A new run of `args.file` executed here; with `run_manifest`, that file must be one."""
    from agent_runtime.variables import read_variables_option  # noqa: PLC0415

    options = run_options(args, discover_config=True)
    config = runtime_config(options)  # its limits apply to everything read below
    found = getattr(args, "config_choice", None)
    if found is not None and args.format == "pretty":
        # A file no flag named changes what runs: say which one it is.
        print(printable(f"runtime config: {found.describe()}", multiline=False),
              file=guarded(sys.stderr))
    loaded = load_manifest(args.file)
    if run_manifest and loaded.run is None:
        raise ManifestError("this is an agent manifest; run-manifest runs a run manifest "
                            "(`agent: {ref: FILE}`): run it with `agent-runtime run`",
                            source=args.file, field="agent")
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
    tenant = run_tenant(args)
    record, _ = AgentRuntime(config=config, tools=tools).new_run(
        manifest=loaded, variables=variables, budget=budget_from(args), run_id=args.run_id,
        options=options, variables_source=variables_source, tenant=tenant)
    check_sinks(args)
    with open_run_store(args) as store:
        if (args.run_id or (loaded.run and loaded.run.run_id)) and \
                store.load_run(record.run_id) is not None:
            raise Conflict(f"a run with id {excerpt(record.run_id)} already exists",
                           source="--run-id")
        runtime, files = build_runtime(args, store, options, prepared=(config, tools))
        try:
            result = execute(args, runtime, record.run_id, lambda: runtime.run_sync(
                manifest=loaded, variables=variables, budget=budget_from(args),
                run_id=record.run_id, options=options, tenant=tenant))
        finally:
            for sink in files:
                sink.close()
    return finish(result, args)


def run_tenant(args: argparse.Namespace) -> str:
    """The tenant of a run the CLI starts: --tenant, else $AGENT_RUNTIME_TENANT, else
    `local`, the tenant of a `serve` with one token on the same store."""
    given = getattr(args, "tenant", None)
    if given is not None:
        return str(given)
    from_env = os.environ.get(TENANT_ENV)
    if from_env is None:
        return LOCAL_TENANT
    try:
        return tenant_name(from_env)
    except argparse.ArgumentTypeError as error:
        raise InvalidInput(str(error), source=f"${TENANT_ENV}") from None


def from_stack(args: argparse.Namespace) -> bool:
    """Whether a resume is requested from the AWS stack rather than executed here: runs
    in the DynamoDB store execute in their stack unless `--here` says otherwise."""
    return bool(args.store_driver == "dynamodb" and not getattr(args, "here", False))


def request_from_stack(args: argparse.Namespace, store: RunStore, record: RunRecord, *,
                       reason: str) -> int:
    """Record the resume request (the stack's reconciler reads it) and put the
    `resume-requested` event on the stack's bus when it is known (the fast path)."""
    from stores.dynamodb.location import stack_resume_events  # noqa: PLC0415 - needs botocore

    if record.status is not RunStatus.SUSPENDED:
        raise Conflict(f"run {excerpt(record.run_id)} is {record.status.value}: only a suspended "
                       "run is resumed by request; the stack's reconciler takes over runs whose "
                       "execution died (or take it over here: --here --allow-running-takeover)",
                       source="RUN_ID")
    store.request_resume(record.run_id, at=utc_now(), reason=reason)
    events = stack_resume_events(str(args.store))
    budget = budget_from(args)
    sent, note = None, "no event bus known (event_bus= or AGENT_RUNTIME_EVENT_BUS): the " \
        "stack's reconciler resumes it on its next pass"
    if events is not None:
        try:
            events.put(record.run_id, attempt=record.attempt, reason=reason,
                       max_total_tokens=None if budget is None else budget.max_total_tokens)
            sent, note = events.bus, f"resume-requested event put on bus {events.bus}"
        except StoreError as error:
            note = f"{error}; the stack's reconciler resumes it on its next pass"
    out = guarded(sys.stdout)
    if args.format in ("json", "ndjson"):
        print(to_json_text({"run_id": record.run_id, "status": record.status.value,
                            "attempt": record.attempt, "resume_requested": True,
                            "event_bus": sent}), file=out)
    else:
        print(printable(f"resume of run {record.run_id} requested from its stack: {note}. "
                        "To execute it on this machine instead, add --here.", multiline=False),
              file=out)
    return EXIT_COMPLETED


def resume(args: argparse.Namespace, store: RunStore, record: RunRecord,
           effect_resolutions: dict[str, dict[str, Any]] | None = None, *,
           reason: str = "resumed-by-operator") -> int:
    """Continue `record` here, or request it from the stack (`from_stack`); a finished
    run's result is printed as it stands."""
    if record.status.terminal:
        return finish(recorded_result(record), args)
    if from_stack(args):
        return request_from_stack(args, store, record, reason=reason)
    takeover = getattr(args, "allow_running_takeover", False)
    dead_owner = None
    if record.status is RunStatus.RUNNING:
        owner = owner_status(record)
        refusal = takeover_refusal(record, owner, takeover=takeover, now=utc_now(),
                                   store_flags=store_flags_text(args))
        if refusal is not None:
            raise refusal
        if owner.liveness is Liveness.GONE:
            dead_owner = record.lease_owner
    # The store's own rule, tried on the record as read: a held lease is refused
    # before an event log or artifacts directory is opened (the store decides
    # again, atomically, when the attempt is reserved).
    transitions.reserve_attempt(record, record.run_id, owner="-", now=utc_now(),
                                lease_seconds=1, allow_running_takeover=takeover,
                                expired_owner=dead_owner)
    options = run_options(args, record.options)
    runtime, files = build_runtime(args, store, options)
    manifest_path = options.get("manifest_path")
    manifest = manifest_path if manifest_path and Path(manifest_path).is_file() else None
    try:
        result = execute(args, runtime, record.run_id, lambda: runtime.run_sync(
            run_id=record.run_id, resume=True, manifest=manifest, budget=budget_from(args),
            allow_running_takeover=takeover, expired_owner=dead_owner,
            effect_resolutions=effect_resolutions))
    finally:
        for sink in files:
            sink.close()
    return finish(result, args)


def check_runtime_flags(args: argparse.Namespace) -> None:
    """`--model`, `--tools`, `--config` and the sinks of a command that resumes a run,
    checked before the store is opened or anything in it is changed."""
    runtime_config(run_options(args))
    check_sinks(args)


def cmd_resume(args: argparse.Namespace) -> int:
    check_run_id(args.run_id, source="RUN_ID")
    check_runtime_flags(args)
    with open_run_store(args, create=False) as store:
        return resume(args, store, load_run(store, args.run_id, args))


def cmd_approve(args: argparse.Namespace) -> int:
    response = None
    if args.response is not None:
        response = parse_json_option(args.response, source="--response")
    if args.by is not None and (not args.by.isprintable() or len(args.by) > 200):
        raise InvalidInput("must be a name: printable, at most 200 characters", source="--by")
    check_run_id(args.run_id, source="RUN_ID")
    check_runtime_flags(args)
    with open_run_store(args, create=False) as store:
        record = load_run(store, args.run_id, args)
        suspension = record.suspension
        if record.status is not RunStatus.SUSPENDED or suspension is None \
                or suspension.reason != "approval":
            waiting = f" for {suspension.reason}" if suspension and \
                record.status is RunStatus.SUSPENDED else ""
            raise Conflict(f"run {excerpt(args.run_id)} is {record.status.value}{waiting}, "
                           "not waiting for an approval", source="RUN_ID")
        approval_id = AgentRuntime(store=store).approve(
            args.run_id, approved=not args.reject, response=response, responded_by=args.by)
        verdict = "rejected" if args.reject else "approved"
        print(printable(f"{verdict} {approval_id} of run {args.run_id}", multiline=False),
              file=guarded(sys.stderr))
        if not args.resume:
            return EXIT_COMPLETED
        return resume(args, store, load_run(store, record.run_id, args),
                      reason="approval-recorded")


def cmd_effects_resolve(args: argparse.Namespace, run_id: str, key: str) -> int:
    check_run_id(run_id, source="RUN_ID")
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
    check_runtime_flags(args)
    with open_run_store(args, create=False) as store:
        record = load_run(store, run_id, args)
        suspension = record.suspension
        if record.status is not RunStatus.SUSPENDED or suspension is None \
                or suspension.reason != "effect-unknown" or suspension.details.get("key") != key:
            raise Conflict(f"run {quote(run_id)} is not waiting on effect {quote(key)} "
                           f"(it is {record.status.value})", source="effects resolve")
        if from_stack(args):
            # Recorded where the stack's executor reads it (`Execution.effect_resolution`).
            store.resolve_approval(run_id, key, approved=True, response=resolution,
                                   responded_by=None, at=utc_now())
            return request_from_stack(args, store, load_run(store, run_id, args),
                                      reason="effect-settled")
        return resume(args, store, record, effect_resolutions={key: resolution})


def cmd_fork(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415

    check_run_id(args.run_id, source="RUN_ID")
    if args.new_run_id is not None:
        check_run_id(args.new_run_id, source="--run-id")
    check_runtime_flags(args)
    with open_run_store(args, create=False) as store:
        record = load_run(store, args.run_id, args)
        options = run_options(args, record.options)
        runtime, files = build_runtime(args, store, options)
        try:
            result = execute(args, runtime, None, lambda: asyncio.run(runtime.fork(
                args.run_id, seq=args.seq, new_run_id=args.new_run_id,
                budget=budget_from(args))))
        finally:
            for sink in files:
                sink.close()
    return finish(result, args)


def cmd_cancel(args: argparse.Namespace) -> int:
    check_run_id(args.run_id, source="RUN_ID")
    with open_run_store(args, create=False) as store:
        record = load_run(store, args.run_id, args)
        if record.status.terminal:
            raise Conflict(f"run {excerpt(args.run_id)} is already {record.status.value}",
                           source="RUN_ID")
        AgentRuntime(store=store).cancel(args.run_id)
        cancelled = load_run(store, args.run_id, args)
    if args.format == "json":
        print(to_json_text(recorded_result(cancelled).to_json()), file=guarded(sys.stdout))
    else:
        print(printable(f"cancelled run {args.run_id}", multiline=False), file=guarded(sys.stdout))
    return EXIT_COMPLETED
