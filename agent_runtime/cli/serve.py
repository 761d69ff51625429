"""`agent-runtime serve`: the HTTP API on this machine (docs/design.md section 12).

    agent-runtime serve [--host 127.0.0.1] [--port 8000] [--max-concurrent-runs 2000]
                        [--tenant-concurrent-runs N] [--workers 1] [--processes 1|auto] [--pin-cpus]
                        [--store-threads 16]
                        [--token T | --tokens FILE] [--reconcile-interval 30]
                        [--config FILE] [--tools FILE.py] [--store-driver D --store LOC]
                        [--max-connections 256] [--header-timeout 10] [--body-timeout 30]
                        [--idle-timeout 5] [--write-timeout 30]

Needs the `serve` extra (uvicorn, Powertools): `pip install 'agent-runtime-durable[serve]'`,
or `make serve` in the repository. Runs live in the same store as the CLI's,
so `agent-runtime list`/`inspect` see what the API started and the reverse.

Auth: every request carries `Authorization: Bearer <token>`. Without
`--token` or `--tokens`, a random token is generated at each start and
written to `.agent-runtime/serve.token` (mode 0600); the token itself is
never printed or logged, only where to read it.

Runs execute as asyncio tasks on `--workers` event loops (default 1; uvloop's
when it is installed, as the server's own: `agent_runtime.api.run_loops`), up to
`--max-concurrent-runs` at once and `--tenant-concurrent-runs` of one tenant;
past either bound a request that would start or resume a run is answered 429
with Retry-After and creates nothing (`agent_runtime.api.local_launcher`,
`run_capacity`). Their store calls share `--store-threads` threads.
`--processes N` serves from N processes on the one address and store, so that
runs are stepped on N cores; the run limits are the server's, its processes'
places counted together (`agent_runtime.cli.serve_processes`).

Clients are not trusted (docs/design.md section 14): connections are capped, a
request's head and body, an idle connection and a client that does not read
its answer are each timed out (`agent_runtime.api.connections`), and one
tenant holds at most its share of the runs executing at once.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent_runtime.cli.flags import DEFAULT_ARTIFACTS, DEFAULT_EVENTS, DEFAULT_STORE, seconds
from agent_runtime.errors import InvalidInput
from agent_runtime.run_options import LOCAL_TENANT

if TYPE_CHECKING:  # the engine is imported when `serve` runs, not when the parser is built
    from agent_runtime.events import EventSink

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# One event loop: runs waiting on models cost coroutines, and the Python they run
# between waits would not go faster on more threads (agent_runtime.api.run_loops).
DEFAULT_WORKERS = 1
MAX_WORKERS = 64
# One process: its runs wait as coroutines; more processes step runs on more cores
# (agent_runtime.cli.serve_processes).
DEFAULT_PROCESSES = 1
MAX_PROCESSES = 64
# Mirrors agent_runtime.api.run_capacity.DEFAULT_MAX_RUNS (the serve extra's side).
DEFAULT_MAX_CONCURRENT_RUNS = 2000
# Threads every run's store calls share: enough for commits of concurrent runs
# to overlap, few enough for a small machine.
DEFAULT_STORE_THREADS = 16
MAX_STORE_THREADS = 256
DEFAULT_RECONCILE_INTERVAL = 30.0
DEFAULT_GRACE_SECONDS = 10.0
DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_IDLE_TIMEOUT = 5.0
DEFAULT_WRITE_TIMEOUT = 30.0
# HttpResolverLocal arrived in 3.25; before 3.35 it shared one request's
# state with every concurrent request (aws-powertools/powertools-lambda-python#8451).
MIN_POWERTOOLS = (3, 35)
INSTALL_HINT = ("install the serve extra: pip install 'agent-runtime-durable[serve]' "
                "(in the repository: make serve)")

EXIT_FAILED = 1


def add_serve_parser(commands: Any,
                     store_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    # Nothing from agent_runtime.api here: it needs the serve extra, and every
    # command builds this parser.
    serve = commands.add_parser(
        "serve", help="serve the HTTP API on this machine (needs the serve extra)",
        description="Serve the HTTP API: start, watch, approve, resume, cancel and fork runs "
                    "over HTTP, executed as asyncio tasks (thousands at once) over the same "
                    "store as the CLI. Every request needs `Authorization: Bearer TOKEN`.")
    serve.add_argument("--host", default=DEFAULT_HOST,
                       help=f"the address to listen on (default: {DEFAULT_HOST}, this machine "
                            "only)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT,
                       help=f"the port (default: {DEFAULT_PORT}; 0 picks a free one)")
    serve.add_argument("--max-concurrent-runs", type=int, default=DEFAULT_MAX_CONCURRENT_RUNS,
                       metavar="N",
                       help="runs executed at once, each waiting on its model or tools as a "
                            "coroutine; past it a request that would start or resume a run "
                            "is answered 429 with Retry-After and creates nothing (default: "
                            f"{DEFAULT_MAX_CONCURRENT_RUNS})")
    serve.add_argument("--tenant-concurrent-runs", "--tenant-workers", dest="tenant_runs",
                       type=int, metavar="N",
                       help="runs of one tenant executed at once, so that one tenant's burst "
                            "leaves the others room; past it that tenant's requests are "
                            "answered 429 (default: half of --max-concurrent-runs when the "
                            "tokens name more than one tenant, else all of it; "
                            "--tenant-workers is its former name)")
    serve.add_argument("--workers", type=int, default=DEFAULT_WORKERS, metavar="N",
                       help="event loops (one thread each) the runs are shared between; more "
                            "than one helps only when code blocks a loop (default: "
                            f"{DEFAULT_WORKERS})")
    serve.add_argument("--processes", type=process_count, default=DEFAULT_PROCESSES,
                       metavar="N",
                       help="processes serving on the one address and store, so that runs "
                            "are stepped on N cores; the run limits bound them together; "
                            "`auto`: one per core this process may run on, at most "
                            f"{MAX_PROCESSES} (default: {DEFAULT_PROCESSES})")
    serve.add_argument("--pin-cpus", dest="pin_cpus", action="store_true",
                       help="keep each serve process on one CPU of those it may run on "
                            "(the Nth process on the Nth, round robin; Linux): its threads "
                            "hand work to each other on one core, which costs less than "
                            "across cores, most of all on virtual machines")
    serve.add_argument("--serve-process", dest="serve_process", metavar="FDS",
                       help=argparse.SUPPRESS)
    serve.add_argument("--store-threads", type=int, default=DEFAULT_STORE_THREADS,
                       metavar="N",
                       help="threads the runs' store calls share, so that commits of "
                            f"concurrent runs overlap (default: {DEFAULT_STORE_THREADS})")
    auth = serve.add_mutually_exclusive_group()
    auth.add_argument("--token", metavar="TOKEN",
                      help="accept this bearer token, tenant `local` (32 characters or more; "
                           "visible to other local users in the process list: prefer --tokens "
                           "or the generated one)")
    auth.add_argument("--tokens", metavar="FILE",
                      help="a YAML mapping of bearer token -> tenant, mode 0600 (default: a "
                           "new random token in .agent-runtime/serve.token, mode 0600)")
    serve.add_argument("--reconcile-interval", type=seconds, default=DEFAULT_RECONCILE_INTERVAL,
                       metavar="S", help="resume stranded runs every S seconds (default: "
                                         f"{DEFAULT_RECONCILE_INTERVAL:g})")
    serve.add_argument("--grace-seconds", type=float, default=DEFAULT_GRACE_SECONDS,
                       metavar="S", help="on SIGINT/SIGTERM no run starts another model "
                                         "request, tool call or step; how long the calls in "
                                         "flight may take to end before each run suspends "
                                         "`interrupted`, for the next serve to resume "
                                         f"(default: {DEFAULT_GRACE_SECONDS:g})")
    serve.add_argument("--config", metavar="FILE", help="runtime config (providers, models, "
                                                        "webhooks) for every run")
    serve.add_argument("--tools", metavar="FILE.py", action="append",
                       help="import @agent_runtime.tool functions from a file (repeatable)")
    serve.add_argument("--events", metavar="FILE|none", default=DEFAULT_EVENTS,
                       help=f"JSONL event log of every run (default: {DEFAULT_EVENTS})")
    serve.add_argument("--artifacts", metavar="DIR|none", default=DEFAULT_ARTIFACTS,
                       help=f"where tools' artifacts are kept (default: {DEFAULT_ARTIFACTS})")
    serve.add_argument("--lease-seconds", type=seconds, default=30.0, metavar="S",
                       help="lease length of executing runs (default: 30)")
    serve.add_argument("--no-access-log", dest="access_log", action="store_false",
                       help="do not log every request")
    _add_connection_flags(serve)
    store_flags(serve)


def _add_connection_flags(serve: argparse.ArgumentParser) -> None:
    # The defaults live with the code that applies them (ConnectionLimits), which
    # needs the serve extra; these are the same numbers.
    limits = serve.add_argument_group(
        "connection limits",
        "How many connections serve keeps open and how long a client may take. A client "
        "past a limit is answered (408 Request Timeout, 503 Service Unavailable) or just "
        "disconnected; requests of other clients are not held up by it.")
    limits.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
                        metavar="N", help="connections open at once (each process's, with "
                                          "--processes); past it a new one is answered 503 "
                                          f"(default: {DEFAULT_MAX_CONNECTIONS})")
    for flag, default, what in (
            ("--header-timeout", DEFAULT_HEADER_TIMEOUT,
             "for a request's head to arrive, from the connection's start or its first byte"),
            ("--body-timeout", DEFAULT_BODY_TIMEOUT, "for a request's body to arrive"),
            ("--idle-timeout", DEFAULT_IDLE_TIMEOUT,
             "a connection may stay open with no request"),
            ("--write-timeout", DEFAULT_WRITE_TIMEOUT,
             "a client may read nothing of its answer before it is disconnected")):
        limits.add_argument(flag, type=seconds, default=default, metavar="S",
                            help=f"seconds {what} (default: {default:g})")


def missing_serve_extra() -> str | None:
    """Why `serve` cannot run here, or None."""
    import importlib.metadata  # noqa: PLC0415 - costly; needed only by `serve`

    try:
        version = importlib.metadata.version("aws-lambda-powertools")
        import aws_lambda_powertools.event_handler.http_resolver  # noqa: F401, PLC0415
    except (ImportError, importlib.metadata.PackageNotFoundError):
        return "aws-lambda-powertools is not installed"
    found = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if found < MIN_POWERTOOLS:
        return (f"aws-lambda-powertools {version} is too old (serve needs "
                f"{'.'.join(map(str, MIN_POWERTOOLS))} or newer)")
    try:
        import uvicorn  # noqa: F401, PLC0415
    except ImportError:
        return "uvicorn is not installed"
    return None


def process_count(value: str) -> int:
    """`--processes`: a number, or `auto` for one per core this process may run on."""
    if value == "auto":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count() or 1
        return min(cores, MAX_PROCESSES)
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a number of processes or auto, not {value!r}") from None


def _check(args: argparse.Namespace) -> None:
    if not 0 <= args.port <= 65535:
        raise InvalidInput("must be a port number, 0 to 65535", source="--port")
    if not 1 <= args.workers <= MAX_WORKERS:
        raise InvalidInput(f"must be 1 to {MAX_WORKERS}", source="--workers")
    if not 1 <= args.processes <= MAX_PROCESSES:
        raise InvalidInput(f"must be 1 to {MAX_PROCESSES}", source="--processes")
    if args.pin_cpus and not hasattr(os, "sched_setaffinity"):
        raise InvalidInput("needs a system that sets a process's CPUs (Linux)",
                           source="--pin-cpus")
    if args.processes > 1 and args.store_driver == "memory":
        raise InvalidInput("needs a store the processes share; the memory store lives in "
                           "one process (use sqlite or file)", source="--processes")
    if args.max_concurrent_runs < 1:
        raise InvalidInput("must be 1 or more", source="--max-concurrent-runs")
    if args.tenant_runs is not None and not 1 <= args.tenant_runs <= args.max_concurrent_runs:
        raise InvalidInput(f"must be 1 to --max-concurrent-runs ({args.max_concurrent_runs})",
                           source="--tenant-concurrent-runs")
    if not 1 <= args.store_threads <= MAX_STORE_THREADS:
        raise InvalidInput(f"must be 1 to {MAX_STORE_THREADS}", source="--store-threads")
    if args.max_connections < 1:
        raise InvalidInput("must be 1 or more", source="--max-connections")
    if args.reconcile_interval <= 0:
        raise InvalidInput("must be a positive number of seconds", source="--reconcile-interval")
    if args.grace_seconds < 0:
        raise InvalidInput("must be 0 or more seconds", source="--grace-seconds")
    if args.lease_seconds <= 0:
        raise InvalidInput("must be a positive number of seconds", source="--lease-seconds")


def _tokens(args: argparse.Namespace) -> tuple[dict[str, str], str]:
    """The accepted tokens, and a line telling the user how to authenticate."""
    from agent_runtime.api.local_auth import (  # noqa: PLC0415
        DEFAULT_TOKEN_FILE,
        generate_token_file,
        load_token_file,
        read_generated_token,
        single_token,
    )

    if args.token is not None:
        return single_token(args.token), "auth: the --token given (tenant local)"
    if args.tokens is not None:
        tokens = load_token_file(args.tokens)
        tenants = ", ".join(sorted(set(tokens.values())))
        return tokens, f"auth: {len(tokens)} token(s) from {args.tokens} (tenants: {tenants})"
    if args.serve_process is not None:  # a child: the supervisor's token, already written
        return read_generated_token(DEFAULT_TOKEN_FILE), ""
    token = generate_token_file(DEFAULT_TOKEN_FILE)
    return ({token: LOCAL_TENANT},
            f"auth: a new bearer token is in {DEFAULT_TOKEN_FILE} (mode 0600, tenant local)")


def _tenant_runs(args: argparse.Namespace, tokens: dict[str, str]) -> int:
    """`--tenant-concurrent-runs`, or its default: with several tenants, one tenant may
    hold half of the places, so that no one tenant keeps the others out (a single
    tenant gets them all)."""
    if args.tenant_runs is not None:
        return int(args.tenant_runs)
    if len(set(tokens.values())) > 1:
        return max(1, int(args.max_concurrent_runs) // 2)
    return int(args.max_concurrent_runs)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _listening(args: argparse.Namespace, url: str, tenant_runs: int,
               auth_line: str) -> list[str]:
    """The lines `serve` prints once it listens (the first names its address)."""
    from agent_runtime.api.local_auth import DEFAULT_TOKEN_FILE  # noqa: PLC0415
    from agent_runtime.api.run_loops import loop_kind  # noqa: PLC0415

    store_label = "memory" if args.store_driver == "memory" \
        else f"{args.store_driver}:{args.store or DEFAULT_STORE}"
    processes = "" if args.processes == 1 else f"{args.processes} processes of "
    lines = [f"agent-runtime serve: listening on {url} ({args.max_concurrent_runs} "
             f"runs at once, {tenant_runs} per tenant, on {processes}{args.workers} "
             f"{loop_kind()} event loop(s), {args.store_threads} store threads, "
             f"store {store_label}, reconcile every {args.reconcile_interval:g}s)",
             auth_line]
    if args.token is None and args.tokens is None:
        lines.append('  try: curl -H "Authorization: Bearer '
                     f'$(cat {DEFAULT_TOKEN_FILE})" {url}/runs')
    return lines


def _warn_tenant_share(args: argparse.Namespace) -> None:
    import logging  # noqa: PLC0415

    logging.getLogger("agent_runtime.serve").warning(
        "one tenant's runs may hold all %d places while another tenant's are "
        "refused; use --tenant-concurrent-runs below --max-concurrent-runs",
        args.max_concurrent_runs)


def _supervise(args: argparse.Namespace, run_args: argparse.Namespace,
               tokens: dict[str, str], auth_line: str) -> int:
    """`--processes N`: check what the children will load, bind, start them and watch
    them until stopped (agent_runtime.cli.serve_processes). The exit code."""
    from agent_runtime.api.place_ledger import PlaceLedger  # noqa: PLC0415
    from agent_runtime.api.server import bind_socket  # noqa: PLC0415
    from agent_runtime.cli.options import open_run_store  # noqa: PLC0415
    from agent_runtime.cli.serve_processes import ServeProcesses, child_command  # noqa: PLC0415
    from agent_runtime.cli.serve_runtimes import ServeRuntimes  # noqa: PLC0415
    from agent_runtime.store_thread import StorePool  # noqa: PLC0415

    # Once, here: a store that does not open, or a config or tools file that
    # does not load, stops serve before any child starts.
    pool = StorePool(1)
    try:
        with open_run_store(args) as store:
            ServeRuntimes(run_args, store, [], pool)(None)
    finally:
        pool.shutdown(wait=False)
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as error:
        print(f"error: cannot listen on {_url(args.host, args.port)}: {error}", file=sys.stderr)
        return EXIT_FAILED
    host, port = sock.getsockname()[:2]
    tenant_runs = _tenant_runs(args, tokens)
    print("\n".join(_listening(args, _url(host, port), tenant_runs, auth_line)), flush=True)
    if tenant_runs == args.max_concurrent_runs and len(set(tokens.values())) > 1:
        _warn_tenant_share(args)
    ledger = PlaceLedger.create(args.processes, tenants=list(tokens.values()))
    return ServeProcesses(child_command(args.argv), args.processes, sock, ledger).run()


def cmd_serve(args: argparse.Namespace) -> int:
    missing = missing_serve_extra()
    if missing is not None:
        print(f"error: agent-runtime serve: {missing}; {INSTALL_HINT}", file=sys.stderr)
        return EXIT_FAILED
    import logging  # noqa: PLC0415 - only `serve` logs; every command builds its parser

    from agent_runtime.api.collector_pace import pace_for_many_runs  # noqa: PLC0415
    from agent_runtime.api.connections import ConnectionLimits  # noqa: PLC0415
    from agent_runtime.api.local_auth import BearerTokens, HostCheck  # noqa: PLC0415
    from agent_runtime.api.local_launcher import LocalLauncher  # noqa: PLC0415
    from agent_runtime.api.local_reconcile import ReconcileLoop  # noqa: PLC0415
    from agent_runtime.api.server import bind_socket, build_app, serve_until_stopped  # noqa: PLC0415
    from agent_runtime.api.services import ApiServices  # noqa: PLC0415
    from agent_runtime.cli.options import open_run_store  # noqa: PLC0415
    from agent_runtime.cli.serve_processes import ChildEnds, pin_to_cpu  # noqa: PLC0415
    from agent_runtime.cli.serve_runtimes import ServeRuntimes  # noqa: PLC0415
    from agent_runtime.events import JsonlEventSink  # noqa: PLC0415
    from agent_runtime.startup_heap import freeze_startup_heap  # noqa: PLC0415
    from agent_runtime.store_thread import StorePool  # noqa: PLC0415

    _check(args)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("httpx", "httpx2"):
        # A line per model request: thousands a minute from a busy server.
        logging.getLogger(chatty).setLevel(logging.WARNING)
    tokens, auth_line = _tokens(args)
    # Every job builds a runtime of its own from the run's remembered options;
    # the flags given here win, as for `agent-runtime resume`.
    run_args = argparse.Namespace(model=None, config=args.config, tools=args.tools,
                                  events="none", artifacts=args.artifacts,
                                  lease_seconds=args.lease_seconds, stream=False, format="json")
    if args.processes > 1 and args.serve_process is None:
        return _supervise(args, run_args, tokens, auth_line)
    child = None if args.serve_process is None else ChildEnds.parse(args.serve_process)
    if args.pin_cpus:  # before any thread starts: each inherits its starter's CPUs
        logging.getLogger("agent_runtime.serve").info(
            "serve process %d pinned to CPU %d", os.getpid(),
            pin_to_cpu(0 if child is None else child.slot))
    log = None if args.events == "none" else JsonlEventSink(args.events, per_turn=True)
    sinks: list[EventSink] = [log] if log is not None else []
    store_pool = StorePool(args.store_threads)
    try:
        with open_run_store(args) as store:
            runtime_for = ServeRuntimes(run_args, store, sinks, store_pool)
            # Built now: a config or tools file that does not load stops serve at once.
            api_runtime = runtime_for(None)
            tenant_runs = _tenant_runs(args, tokens)
            launcher = LocalLauncher(store, runtime_for, loops=args.workers,
                                     max_runs=args.max_concurrent_runs,
                                     tenant_runs=tenant_runs,
                                     ledger=None if child is None else child.places(),
                                     store_pool=store_pool)
            limits = ConnectionLimits(
                # A process's own: see agent_runtime.cli.serve_processes.
                max_connections=args.max_connections,
                header_timeout=args.header_timeout,
                body_timeout=args.body_timeout, idle_timeout=args.idle_timeout,
                write_timeout=args.write_timeout)
            services = ApiServices(store=store, runtime=api_runtime, launcher=launcher,
                                   authenticator=BearerTokens(tokens), capacity=launcher)
            if child is not None:
                sock = child.socket()
                child.stop_with_supervisor()
            else:
                try:
                    sock = bind_socket(args.host, args.port)
                except OSError as error:
                    launcher.close()
                    print(f"error: cannot listen on {_url(args.host, args.port)}: {error}",
                          file=sys.stderr)
                    return EXIT_FAILED
            host, port = sock.getsockname()[:2]
            try:
                app = build_app(services, HostCheck(args.host, port), limits)
            except BaseException:
                sock.close()
                launcher.close()
                raise
            reconcile = ReconcileLoop(store, launcher, interval=args.reconcile_interval,
                                      event_sinks=sinks, started=None if child is None
                                      else child.server_started())
            if child is None:
                print("\n".join(_listening(args, _url(host, port), tenant_runs, auth_line)),
                      flush=True)
                if tenant_runs == args.max_concurrent_runs and len(set(tokens.values())) > 1:
                    _warn_tenant_share(args)
            else:
                logging.getLogger("agent_runtime.serve").info(
                    "serve process %d started (slot %d, %d connections)",
                    os.getpid(), child.slot, args.max_connections)
            # Started: what serve built so far lives as long as it does, and what
            # it builds from now on is mostly its runs'.
            freeze_startup_heap()
            pace_for_many_runs()
            return serve_until_stopped(app, sock, launcher=launcher, reconcile=reconcile,
                                       grace_seconds=args.grace_seconds,
                                       access_log=args.access_log, limits=limits)
    finally:
        store_pool.shutdown(wait=False)
        if log is not None:
            log.close()
