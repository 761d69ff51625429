"""`agent-runtime reconcile`: finish local runs whose owner died (docs/design.md section 7).

On this host a run's owner is `host:pid`, so a run whose process is gone is
taken over at once, without waiting for its lease to expire. With
`--resume-crash-looped` it instead resumes every run the reconciler suspended
as `crash-loop` (once the cause is fixed), and exits.
"""

from __future__ import annotations

import argparse
import sys

from agent_runtime.blocking_run import run_blocking
from agent_runtime.cli.errors import EXIT_COMPLETED, EXIT_FAILED
from agent_runtime.cli.flags import DEFAULT_ARTIFACTS
from agent_runtime.cli.options import check_output_file, open_run_store, run_options
from agent_runtime.cli.output import guarded
from agent_runtime.cli.reports import print_reconcile_summary
from agent_runtime.cli.runtime import build_runtime
from agent_runtime.events import EventSink, JsonlEventSink
from agent_runtime.reconcile import Reconciler


def cmd_reconcile(args: argparse.Namespace) -> int:
    if args.events != "none":
        check_output_file(args.events, flag="--events")
    log = None if args.events == "none" else JsonlEventSink(args.events)
    sinks: list[EventSink] = [log] if log else []
    # Resumed runs write to the command's event log, with their remembered options.
    run_args = argparse.Namespace(events="none", artifacts=DEFAULT_ARTIFACTS,
                                  lease_seconds=args.lease_seconds)
    out = guarded(sys.stdout)
    try:
        with open_run_store(args) as store:
            reconciler = Reconciler(
                store, max_takeovers=args.max_takeovers, resume_grace=args.resume_grace,
                event_sinks=sinks, dead_owners_early=True,
                runtime_for=lambda record: build_runtime(run_args, store,
                                                         run_options(run_args, record.options),
                                                         extra_sinks=sinks)[0])
            if args.resume_crash_looped:
                summary = run_blocking(reconciler.resume_crash_looped())
                print_reconcile_summary(summary, args.format, out)
                return EXIT_FAILED if summary.errors else EXIT_COMPLETED
            if args.interval is None:
                summary = reconciler.reconcile_sync()
                print_reconcile_summary(summary, args.format, out)
                return EXIT_FAILED if summary.errors else EXIT_COMPLETED
            try:
                reconciler.reconcile_every(args.interval, lambda summary: print_reconcile_summary(
                    summary, args.format, out))
            except KeyboardInterrupt:
                print("reconcile: interrupted; a run it was resuming keeps its latest checkpoint "
                      "for the next pass", file=guarded(sys.stderr))
                return EXIT_COMPLETED
    finally:
        if log is not None:
            log.close()
