"""`agent-runtime gc`: delete finished runs older than a duration, artifacts included.

    agent-runtime gc --older-than 30d [--status completed ...] [--dry-run]
                     [--artifacts DIR|none] [--store-driver D --store LOCATION]

The logic is `agent_runtime.retention.collect`; this module is its flags and
its report (one line per run, then a total; `--format json` for scripts).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_runtime.cli.flags import DEFAULT_ARTIFACTS

if TYPE_CHECKING:
    from agent_runtime.retention import Collected

# The parser is built for every command, `--help` included: it names the
# statuses itself rather than load the stores' records to list them.
STATUSES = ("created", "running", "suspended", "completed", "failed", "cancelled")
FINISHED = "completed, failed, cancelled"


def add_gc_parser(commands: Any,
                  store_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    gc = commands.add_parser(
        "gc", help="delete finished runs older than a duration (checkpoints, effects, "
        "approvals, artifacts)",
        description="Delete every trace of finished runs (completed, failed or cancelled) "
        "that ended at least DURATION ago: the run, its checkpoints, effects, approvals and "
        "artifacts. A created, running or suspended run is never deleted.",
        epilog="example:\n  agent-runtime gc --older-than 30d --dry-run\n"
        "  agent-runtime gc --older-than 30d --status completed",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    gc.add_argument("--older-than", required=True, metavar="DURATION",
                    help="delete runs that finished at least this long ago: 30d, 12h, 15m, "
                    "0s, 2w or a sum (1d12h)")
    gc.add_argument("--status", action="append", metavar="STATUS",
                    choices=STATUSES,
                    help=f"only runs in this finished status (repeatable; default: "
                    f"{FINISHED}); a running, created or suspended run is never deleted")
    gc.add_argument("--dry-run", action="store_true", help="list what would go; delete nothing")
    gc.add_argument("--artifacts", metavar="DIR|none", default=DEFAULT_ARTIFACTS,
                    help=f"the artifacts directory whose runs' artifacts go too "
                    f"(default: {DEFAULT_ARTIFACTS})")
    gc.add_argument("--format", choices=("pretty", "json"), default="pretty")
    store_flags(gc)


def cmd_gc(args: argparse.Namespace) -> int:
    # Imported here: the parser above is built for every command.
    from stores.artifacts import LocalArtifactStore  # noqa: PLC0415
    from stores.base import ArtifactStore  # noqa: PLC0415

    from agent_runtime.cli.errors import EXIT_COMPLETED  # noqa: PLC0415
    from agent_runtime.cli.options import open_run_store  # noqa: PLC0415
    from agent_runtime.retention import collect, finished_statuses, parse_duration  # noqa: PLC0415

    older_than = parse_duration(args.older_than)
    statuses = finished_statuses(args.status)
    artifacts: ArtifactStore | None = None
    # An artifacts directory that does not exist holds nothing: none is created.
    if args.artifacts != "none" and Path(args.artifacts).is_dir():
        artifacts = LocalArtifactStore(args.artifacts)
    with open_run_store(args, create=False) as store:
        result = collect(store, older_than=older_than, statuses=statuses,
                         artifacts=artifacts, dry_run=args.dry_run)
    _report(result, args.format)
    return EXIT_COMPLETED


def _report(result: Collected, form: str) -> None:
    from agent_runtime.excerpts import printable  # noqa: PLC0415

    if form == "json":
        print(json.dumps({"dryRun": result.dry_run, "cutoff": result.cutoff.isoformat(),
                          "runs": [{"runId": run.run_id, "status": run.status.value,
                                    "updatedAt": run.updated_at.isoformat()}
                                   for run in result.runs],
                          "artifacts": result.artifacts}))
        return
    verb = "would delete" if result.dry_run else "deleted"
    for run in result.runs:
        print(printable(f"{verb} {run.run_id} ({run.status.value}, finished "
                        f"{run.updated_at.isoformat(timespec='seconds')})", multiline=False))
    total = f"{verb} {len(result.runs)} finished run(s) last updated before " \
            f"{result.cutoff.isoformat(timespec='seconds')}"
    if not result.dry_run:
        total += f" and {result.artifacts} artifact(s)"
    print(total, file=sys.stdout)


__all__ = ["add_gc_parser", "cmd_gc"]
