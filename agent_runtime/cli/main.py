"""The `agent-runtime` command: its parser and the dispatch to each subcommand.

Exit codes: 0 completed, 10 suspended, 1 failed or cancelled (or a store
error), 2 invalid input (the message names the file, the field and the
reason), 3 not found, 4 conflict, 130 interrupted (the run suspended with
`interrupted`, or the process exited on a second signal); see
`agent_runtime.cli.errors`. Input is checked before anything is opened: a
refused command creates nothing on disk. A run remembers its runtime options
(`--config`, `--model`, `--tools`); `resume` and `approve --resume` reuse them
unless given again.

Start-up is kept cheap: this module imports only argparse and the flag
checks; a subcommand's module (and the engine, when it needs one) is
imported when that subcommand runs, so `--help` costs what Python does.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from agent_runtime.cli.flags import (
    DEFAULT_ARTIFACTS,
    DEFAULT_EVENTS,
    DEFAULT_GRACE_SECONDS,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_TAKEOVERS,
    DEFAULT_PAGE,
    DEFAULT_RESUME_GRACE_SECONDS,
    DEFAULT_STORE,
    RUN_STATUSES,
    STORE_VARIABLE,
    count,
    grace_seconds,
    seconds,
    store_driver,
    tenant_name,
    zoned_time,
)
from agent_runtime.cli.help import EXAMPLES, add_completion_parser
from agent_runtime.errors import InvalidInput
from agent_runtime.run_options import LOCAL_TENANT, TENANT_ENV

VERSION = "0.1.0"  # agent_runtime.__version__, without importing the package's API


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error reported as any invalid input is: one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        raise InvalidInput(f"{message} (see {self.prog} --help)", source=self.prog)


def _command(commands: argparse._SubParsersAction[_Parser], name: str, help_text: str,
             description: str) -> _Parser:
    example = EXAMPLES.get(name)
    return commands.add_parser(
        name, help=help_text, description=description,
        epilog=None if example is None else "example:\n  " + "\n  ".join(example),
        formatter_class=argparse.RawDescriptionHelpFormatter)


CONFIG_HELP = ("runtime config: providers, model profiles, connections, tools, store "
               "(default for a new run: agent-runtime.config.yaml, .yml or .json beside the "
               "manifest, else in the current directory, and named when used; a resumed run "
               "reuses its own)")


def _store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store-driver", type=store_driver, default=None, metavar="DRIVER",
                        help="where runs live: memory, file, sqlite, dynamodb, or a driver an "
                             "installed package adds (entry point group agent_runtime.stores; "
                             f"default: ${STORE_VARIABLE}, else the store: of the "
                             "runtime config, else sqlite)")
    parser.add_argument("--store", metavar="LOCATION",
                        help=f"the store's file, directory or table (default: {DEFAULT_STORE}; "
                             "./.agent-runtime/runs for the file driver)")


def _tenant_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", metavar="NAME", type=tenant_name,
                        help=f"the tenant the run belongs to (default: ${TENANT_ENV}, else "
                             f"{LOCAL_TENANT!r}, the tenant of a `serve` with one token, which "
                             "then shows the run)")


def _execution_flags(parser: argparse.ArgumentParser) -> None:
    _store_flags(parser)
    parser.add_argument("--max-total-tokens", type=count(1), metavar="N",
                        help="token budget across all attempts")
    parser.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    parser.add_argument("--model", metavar="PROVIDER/MODEL",
                        help="use this model for every step (e.g. scripted/echo)")
    parser.add_argument("--tools", metavar="FILE.py", action="append",
                        help="import @agent_runtime.tool functions from a file (repeatable)")
    parser.add_argument("--events", metavar="FILE|none", default=DEFAULT_EVENTS,
                        help=f"JSONL event log (default: {DEFAULT_EVENTS})")
    parser.add_argument("--artifacts", metavar="DIR|none", default=DEFAULT_ARTIFACTS,
                        help=f"where tools' artifacts are kept (default: {DEFAULT_ARTIFACTS})")
    parser.add_argument("--lease-seconds", type=seconds, default=DEFAULT_LEASE_SECONDS,
                        metavar="S", help="lease length; renewed at every checkpoint "
                                          f"(default: {DEFAULT_LEASE_SECONDS:g})")
    parser.add_argument("--grace-seconds", type=grace_seconds, default=DEFAULT_GRACE_SECONDS,
                        metavar="S", help="on Ctrl-C or SIGTERM, how long a call in flight may "
                                          "take to finish before the run suspends "
                                          f"(default: {DEFAULT_GRACE_SECONDS:g})")
    parser.add_argument("--stream", action="store_true", help="show a live view of the run")
    parser.add_argument("--show-reasoning", action="store_true",
                        help="show the reasoning a model streams, in the live view (implies "
                        "--stream; never logged or stored)")
    parser.add_argument("--format", choices=("pretty", "json", "ndjson"), default="pretty")
    _ndjson_shape(parser)


def _ndjson_shape(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ndjson-shape", choices=("native", "reference"), default="native",
                        help="with --format ndjson: this runtime's lines (native), or the "
                        "reference CLI's {type: event|result, ...} with camelCase fields")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="agent-runtime", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A durable runtime for LLM agent runs: every run is checkpointed at each "
                    "commit point and resumes from its latest checkpoint after any crash.",
        epilog="exit codes: 0 completed, 10 suspended, 1 failed or cancelled, 2 invalid input, "
               "3 not found, 4 conflict, 130 interrupted\n"
               "run `agent-runtime COMMAND --help` for a command's flags and an example")
    parser.add_argument("--version", action="version", version=f"agent-runtime {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=_Parser)

    validate = _command(commands, "validate", "check an agent or run manifest",
                        "Check a manifest without running it; with --config, --model or "
                        "--tools, also that this host can run it.")
    validate.add_argument("file")
    validate.add_argument("--config", metavar="FILE",
                          help=CONFIG_HELP + "; given, also check this host can run it")
    validate.add_argument("--model", metavar="PROVIDER/MODEL")
    validate.add_argument("--tools", metavar="FILE.py", action="append")
    validate.add_argument("--format", choices=("pretty", "json"), default="pretty")
    validate.add_argument("--plan", action="store_true",
                          help="also show the waves the steps run in (execution.mode)")
    validate.add_argument("--strict", action="store_true",
                          help="refuse the manifest when a template or condition reads a "
                               "name it never declares (else a warning)")

    run = _command(commands, "run", "start a run of a manifest",
                   "Start a run and execute it here until it completes, fails or suspends. "
                   "Ctrl-C suspends it gracefully (resume continues at once).")
    run.add_argument("file")
    run.add_argument("--variables", metavar="JSON|@FILE",
                     help="variable overrides: a JSON object, or @file (JSON or YAML; an "
                          "object or a list of {key, value})")
    run.add_argument("--run-id", metavar="ID")
    _tenant_flag(run)
    _execution_flags(run)

    run_manifest = _command(
        commands, "run-manifest", "run a run manifest: an agent with its variables and budget",
        "Run a run manifest (schemaVersion, agent: {ref}, variables, runId, budget, "
        "execution), as the reference's run-manifest does: the agent manifest is agent.ref, "
        "relative to the run manifest, and everything the run takes is in the file, so "
        "--variables, --run-id and --max-total-tokens are refused (`run FILE` also runs a run "
        "manifest, taking those flags as overrides). An agent manifest is refused.")
    run_manifest.add_argument("file")
    # Not options of this command: accepted by the parser only to be refused by name.
    run_manifest.add_argument("--variables", help=argparse.SUPPRESS)
    run_manifest.add_argument("--run-id", help=argparse.SUPPRESS)
    _tenant_flag(run_manifest)
    _execution_flags(run_manifest)
    for action in run_manifest._actions:
        if "--max-total-tokens" in action.option_strings:
            action.help = argparse.SUPPRESS  # the run manifest's budget.maxTotalTokens

    resume = _command(commands, "resume", "continue a run from its latest checkpoint",
                      "Continue a suspended run (or, with --allow-running-takeover, a running "
                      "one whose owner died) from its latest checkpoint. A finished run's "
                      "result is printed as it stands.")
    resume.add_argument("run_id")
    resume.add_argument("--allow-running-takeover", action="store_true",
                        help="take over a run whose owner died: at once when it was a process "
                             "of this host that is gone, else once its lease expired")
    resume.add_argument("--here", action="store_true",
                           help="with the dynamodb store: execute on this machine instead of "
                                "requesting the resume from the stack")
    _execution_flags(resume)

    approve = _command(commands, "approve", "answer the approval a run waits for",
                       "Record the answer to the approval a suspended run waits for.")
    approve.add_argument("run_id")
    approve.add_argument("--reject", action="store_true", help="reject instead of approve")
    approve.add_argument("--response", metavar="JSON", help="a JSON value to record")
    approve.add_argument("--by", metavar="NAME", help="who answers")
    approve.add_argument("--resume", action="store_true", help="resume the run afterwards")
    approve.add_argument("--here", action="store_true",
                            help="with the dynamodb store: execute on this machine instead of "
                                 "requesting the resume from the stack")
    _execution_flags(approve)

    effects = _command(
        commands, "effects", "list a run's tool-call effects, or settle an unknown one",
        "agent-runtime effects RUN_ID | agent-runtime effects resolve RUN_ID KEY "
        "(--retry | --result JSON | --skip)")
    effects.add_argument("words", nargs="+", metavar="RUN_ID | resolve RUN_ID KEY")
    settle = effects.add_mutually_exclusive_group()
    settle.add_argument("--retry", action="store_true", help="call the tool again, same key")
    settle.add_argument("--result", metavar="JSON", help="record this as the call's result")
    settle.add_argument("--skip", action="store_true", help="tell the model the call was skipped")
    effects.add_argument("--here", action="store_true",
                            help="with the dynamodb store: execute on this machine instead of "
                                 "requesting the resume from the stack")
    _execution_flags(effects)

    fork = _command(commands, "fork", "start a new run from a saved checkpoint",
                    "Start a new run from a checkpoint of another (the latest by default); "
                    "the original is left unchanged.")
    fork.add_argument("run_id")
    fork.add_argument("--seq", type=count(1), metavar="N",
                      help="the checkpoint (default: latest)")
    fork.add_argument("--run-id", dest="new_run_id", metavar="ID", help="the new run's id")
    _execution_flags(fork)

    cancel = _command(commands, "cancel", "cancel a run",
                      "Cancel a run that has not finished; its owner stops at its next write.")
    cancel.add_argument("run_id")
    cancel.add_argument("--format", choices=("pretty", "json"), default="pretty")
    _store_flags(cancel)

    inspect = _command(commands, "inspect", "show a run, its timeline or one checkpoint",
                       "Show a run and its latest checkpoint's state (its variables, each "
                       "briefly; in JSON, `checkpoint`, whole, with its step results); "
                       "--checkpoints adds its "
                       "timeline (step path, kind, time and tokens per checkpoint); --seq N "
                       "--state shows one checkpoint's variables and step results.")
    inspect.add_argument("run_id")
    inspect.add_argument("--checkpoints", action="store_true", help="show the timeline")
    inspect.add_argument("--seq", type=count(1), metavar="N", help="one checkpoint")
    inspect.add_argument("--state", action="store_true",
                         help="with --seq: its variables and step results")
    inspect.add_argument("--format", choices=("pretty", "json"), default="pretty")
    _store_flags(inspect)

    listing = _command(commands, "list", "list runs, newest first",
                       "List runs newest first with their creation time, status, tokens and "
                       "duration; a last line gives the cursor of the next page.")
    listing.add_argument("--status", action="append", choices=RUN_STATUSES)
    listing.add_argument("--limit", type=count(1), default=DEFAULT_PAGE, metavar="N",
                         help=f"runs per page (default: {DEFAULT_PAGE})")
    listing.add_argument("--cursor", metavar="CURSOR", help="the next page, from a 'more' line")
    listing.add_argument("--agent", metavar="AGENT",
                         help="only runs of this agent (the manifest's id, else its name)")
    listing.add_argument("--id-prefix", metavar="PREFIX", help="only run ids starting with it")
    listing.add_argument("--since", type=zoned_time, metavar="TIME",
                         help="only runs created at or after TIME (ISO 8601 with a zone)")
    listing.add_argument("--until", type=zoned_time, metavar="TIME",
                         help="only runs created before TIME (ISO 8601 with a zone)")
    listing.add_argument("--format", choices=("pretty", "json"), default="pretty")
    listing.set_defaults(default_limit=DEFAULT_PAGE)
    _store_flags(listing)

    events = _command(commands, "events", "print events from a JSONL event log or the API",
                      "Print the events of a JSONL event log, optionally one run's or one "
                      "type's; --tail N prints the last N, --follow keeps reading. With "
                      "--url, FILE is a run id: its durable event log from the HTTP API "
                      "(serve or API Gateway), --follow until the run ends.")
    events.add_argument("file", nargs="?", default=DEFAULT_EVENTS, metavar="FILE|RUN")
    events.add_argument("--url", metavar="URL",
                        help="the HTTP API to read run RUN's events from (e.g. a serve's "
                             "http://127.0.0.1:8000)")
    events.add_argument("--token", metavar="TOKEN",
                        help="with --url: the bearer token (default: $AGENT_RUNTIME_TOKEN, "
                             "else .agent-runtime/serve.token)")
    events.add_argument("--after", type=count(0), default=0, metavar="CURSOR",
                        help="with --url: only events after this cursor")
    events.add_argument("--run", metavar="RUN_ID")
    events.add_argument("--type", metavar="TYPE", help="an event type or prefix (model.*)")
    events.add_argument("--tail", type=count(0), metavar="N", help="only the last N events")
    events.add_argument("--follow", action="store_true", help="keep following the file")
    events.add_argument("--format", choices=("pretty", "ndjson"), default="pretty")
    _ndjson_shape(events)

    reconcile = _command(
        commands, "reconcile", "resume runs whose owner died; suspend runs that keep dying",
        "Resume runs whose owner died (on this host: at once when its process is gone; "
        "elsewhere: once the lease expired), resume suspended runs whose resume was "
        "requested, and suspend (reason crash-loop) runs that keep killing their owner; "
        "--resume-crash-looped resumes those once the cause is fixed.")
    passes = reconcile.add_mutually_exclusive_group()
    passes.add_argument("--resume-crash-looped", action="store_true",
                        help="resume every run suspended as crash-loop (after a fix), then exit")
    passes.add_argument("--once", action="store_true", help="one pass, then exit (the default)")
    passes.add_argument("--interval", type=seconds, metavar="SECONDS",
                        help="a pass every SECONDS until interrupted")
    reconcile.add_argument("--max-takeovers", type=count(0), default=DEFAULT_MAX_TAKEOVERS,
                           metavar="N", help="suspend a run that died again after N takeovers "
                           f"instead of resuming it (default: {DEFAULT_MAX_TAKEOVERS})")
    reconcile.add_argument("--resume-grace", type=seconds,
                           default=DEFAULT_RESUME_GRACE_SECONDS, metavar="SECONDS",
                           help="resume a suspended run whose resume was requested (or whose "
                           "sub-run finished) at least this long ago "
                           f"(default: {DEFAULT_RESUME_GRACE_SECONDS:g})")
    reconcile.add_argument("--lease-seconds", type=seconds, default=DEFAULT_LEASE_SECONDS,
                           metavar="S", help="lease of the runs it resumes "
                                             f"(default: {DEFAULT_LEASE_SECONDS:g})")
    reconcile.add_argument("--events", metavar="FILE|none", default=DEFAULT_EVENTS,
                           help=f"JSONL event log (default: {DEFAULT_EVENTS})")
    reconcile.add_argument("--format", choices=("pretty", "json"), default="pretty")
    _store_flags(reconcile)

    config = _command(commands, "config", "check a runtime config",
                      "agent-runtime config validate FILE: check a runtime config (providers, "
                      "models, tools, store) without running anything.")
    config.add_argument("action", choices=("validate",))
    config.add_argument("file", nargs="?", default=None,
                        help="default: agent-runtime.config.yaml, .yml or .json in the current "
                             "directory")
    config.add_argument("--format", choices=("pretty", "json"), default="pretty")
    config.add_argument("--manifest", metavar="FILE", action="append", default=[],
                        help="also refuse FILE (repeatable) when this config cannot run its "
                             "code steps (no sandbox, language, timeoutMs, environment)")

    examples = _command(commands, "examples", "list, show or run the example agents",
                        "agent-runtime examples list | show NAME | run NAME [run flags]: every "
                        "example manifest the package ships, each listed with what it shows "
                        "(variables, conditions and loops are the reference's standalone "
                        "examples); run uses each one's scripted model and tools, so it runs "
                        "offline.")
    examples.add_argument("action", choices=("list", "show", "run"))
    examples.add_argument("name", nargs="?")
    examples.add_argument("--variables", metavar="JSON|@FILE")
    examples.add_argument("--run-id", metavar="ID")
    _execution_flags(examples)

    from agent_runtime.cli.gc import add_gc_parser  # noqa: PLC0415 - light: flags only
    from agent_runtime.cli.serve import add_serve_parser  # noqa: PLC0415 - light: flags only

    add_serve_parser(commands, _store_flags)
    add_gc_parser(commands, _store_flags)
    add_completion_parser(commands)
    return parser


_parser_cache: list[argparse.ArgumentParser] = []


def _parser() -> argparse.ArgumentParser:
    # Built once per process: tests call `main` thousands of times in one process.
    if not _parser_cache:
        _parser_cache.append(build_parser())
    return _parser_cache[0]


# Each subcommand's module, imported only when it runs.
COMMANDS: dict[str, str | Callable[[argparse.Namespace], int]] = {
    "validate": "agent_runtime.cli.validate:cmd_validate",
    "config": "agent_runtime.cli.validate:cmd_config_validate",
    "run": "agent_runtime.cli.runs:cmd_run",
    "run-manifest": "agent_runtime.cli.runs:cmd_run_manifest",
    "resume": "agent_runtime.cli.runs:cmd_resume",
    "approve": "agent_runtime.cli.runs:cmd_approve",
    "cancel": "agent_runtime.cli.runs:cmd_cancel",
    "fork": "agent_runtime.cli.runs:cmd_fork",
    "effects": "agent_runtime.cli.reads:cmd_effects",
    "inspect": "agent_runtime.cli.reads:cmd_inspect",
    "list": "agent_runtime.cli.reads:cmd_list",
    "events": "agent_runtime.cli.events:cmd_events",
    "reconcile": "agent_runtime.cli.reconcile:cmd_reconcile",
    "serve": "agent_runtime.cli.serve:cmd_serve",
    "completion": "agent_runtime.cli.help:cmd_completion",
    "examples": "agent_runtime.cli.examples:cmd_examples",
    "gc": "agent_runtime.cli.gc:cmd_gc",
}


def _handler(name: str) -> Callable[[argparse.Namespace], int]:
    target = COMMANDS[name]
    if callable(target):
        return target
    module, _, function = target.partition(":")
    handler: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module),
                                                            function)
    return handler


def _format_word(words: list[str]) -> str | None:
    """The value of `--format` among command-line words the parser refused."""
    for index, word in enumerate(words):
        if word.startswith("--format="):
            return word.partition("=")[2]
        if word == "--format" and index + 1 < len(words):
            return words[index + 1]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args: argparse.Namespace | None = None
    reset: Callable[[], None] | None = None
    try:
        args = _parser().parse_args(argv)  # `--help` and `--version` end here, quickly
        # The words as given: `serve --processes` starts its children with them.
        args.argv = list(sys.argv[1:] if argv is None else argv)
        from agent_runtime.cli.options import check_text_flags  # noqa: PLC0415
        from agent_runtime.limits import DEFAULT_LIMITS, reset_limits, set_limits  # noqa: PLC0415

        # The limits in effect start as the defaults; a runtime config read on
        # the way replaces them for this command only.
        token = set_limits(DEFAULT_LIMITS)
        reset = lambda: reset_limits(token)  # noqa: E731

        check_text_flags(args)
        if hasattr(args, "store_driver"):
            from agent_runtime.cli.store import select_store  # noqa: PLC0415

            select_store(args)
        if argv is None and args.command in _CHECKS:
            return _check_then_exit(_handler, args)
        handler = _handler(args.command)
        if argv is None and args.command in _HOSTS:
            # This process hosts a run from here on: what it imported stays.
            from agent_runtime.startup_heap import freeze_startup_heap  # noqa: PLC0415

            freeze_startup_heap()
        return handler(args)
    except Exception as error:
        if not _reported(error):
            raise
        from agent_runtime.cli.errors import report_error  # noqa: PLC0415

        if args is None:  # refused by the parser: the format asked for, from the words
            args = argparse.Namespace(format=_format_word(sys.argv[1:] if argv is None
                                                          else list(argv)))
        if isinstance(error, BrokenPipeError):
            # The reader went away (`| head`): what it wanted, it got. What is
            # still buffered goes nowhere, so exit prints no traceback either.
            from agent_runtime.cli.output import TerminalStream  # noqa: PLC0415

            TerminalStream(sys.stdout).reader_gone()
            return 0
        return report_error(error, args)
    except KeyboardInterrupt:
        from agent_runtime.cli.errors import EXIT_INTERRUPTED  # noqa: PLC0415

        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if reset is not None:
            reset()


# Commands that read a file, print a verdict and end the process.
_CHECKS = frozenset({"validate", "config"})
# Commands whose process goes on to execute runs (`serve` settles its own heap
# once it has built its server).
_HOSTS = frozenset({"run", "resume", "fork", "reconcile"})


def _check_then_exit(handler: Callable[[str], Callable[[argparse.Namespace], int]],
                     args: argparse.Namespace) -> int:
    """Run a check as the whole of this process (the command line's, not a caller's).

    Building the manifest models allocates much and frees little, and at exit
    the interpreter's last collections walk every object built (pydantic's
    validators, schemas and classes): together a fifth of what the check
    costs. Nothing here needs either: the collector stays off, and what is
    alive when the check ends is frozen out of the final collections, for the
    operating system to reclaim with the process.
    """
    gc.disable()
    try:
        return handler(args.command)(args)
    finally:
        gc.freeze()


def _reported(error: Exception) -> bool:
    """Whether `error` ends the command with an error line (else it is a bug: raised)."""
    if isinstance(error, InvalidInput | OSError):
        return True
    # A store error can only come from a command that imported the stores.
    store_base = sys.modules.get("stores.base")
    return store_base is not None and isinstance(error, store_base.StoreError)
