"""`agent-runtime validate FILE` and `agent-runtime config validate FILE`.

They load only what they check: the manifest reader, and the engine only
when `--config`, `--model` or `--tools` ask whether this host can run it.

With `--format json` each prints one summary object: the reference's fields
first (`valid`, `schemaVersion`, `id`, `name`, `stepCount` for a manifest;
`valid`, `version`, `providerCount`, `modelCount`, `connectionCount` for a
config), then this runtime's (for a manifest: `file`, `kind`, `agent`,
`steps`, `manifest_hash`, `config`: the runtime config file read, how it was
found and whether the host was checked against it, or null; `warnings`: each
template or condition name the manifest never declares, by field
(agent_runtime/template_references.py; `--strict` refuses them); `plan` with
`--plan`). A refused file prints no summary: the error object on stderr, as
every command's.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from agent_runtime.cli.config_file import CONFIG_NAMES, choose_config, find_config
from agent_runtime.cli.errors import EXIT_COMPLETED
from agent_runtime.cli.options import load_manifest, run_options, runtime_config
from agent_runtime.cli.output import guarded
from agent_runtime.errors import ManifestError, NotFound
from agent_runtime.excerpts import printable
from agent_runtime.manifest import manifest_hash
from agent_runtime.template_references import undeclared_references
from agent_runtime.variables import resolve_variables

if TYPE_CHECKING:
    from agent_runtime.cli.config_file import ConfigChoice
    from agent_runtime.config import RuntimeConfig
    from agent_runtime.run_manifest import LoadedManifest

_PLUGIN_LOADER = "pydantic.plugin._loader"


def _no_plugins() -> tuple[()]:
    return ()


@contextlib.contextmanager
def _without_pydantic_plugins() -> Iterator[None]:
    """Pydantic looks its plugins up when it builds its first validator: it imports
    importlib.metadata and reads every installed distribution's entry points,
    half again what importing pydantic costs. Plugins watch a host's models
    (telemetry); checking a file has no use for them. So while a manifest is
    checked, a pydantic that has not loaded its plugin loader yet finds one
    that reports none, and the real one is in place again afterwards."""
    if _PLUGIN_LOADER in sys.modules:
        yield
        return
    loader = types.ModuleType(_PLUGIN_LOADER)
    loader.get_plugins = _no_plugins  # type: ignore[attr-defined]
    sys.modules[_PLUGIN_LOADER] = loader
    try:
        yield
    finally:
        if sys.modules.get(_PLUGIN_LOADER) is loader:
            del sys.modules[_PLUGIN_LOADER]


def cmd_validate(args: argparse.Namespace) -> int:
    # The runtime config a run of this file would read: --config, else the file
    # found beside the manifest or in the current directory. Its limits apply
    # and its errors are reported; what this host can run (models, keys, tools)
    # is checked only when --config, --model or --tools ask for it.
    options = run_options(args, discover_config=True)
    host_check = bool(args.config or args.model or args.tools)
    choice = choose_config(args.config, args.file)
    # A host check (--config, --model, --tools) builds the engine, plugins and all.
    with contextlib.nullcontext() if host_check else _without_pydantic_plugins():
        config = runtime_config(options)
        loaded = load_manifest(args.file)
    if loaded.run is not None:
        overrides = {item.key: item.value for item in loaded.run.variables or []}
        resolve_variables(loaded.agent, overrides, source=str(loaded.path))
    if host_check:
        from agent_runtime.cli.runtime import load_tools  # noqa: PLC0415 - a host check only
        from agent_runtime.engine import AgentRuntime  # noqa: PLC0415

        AgentRuntime(config=config, tools=load_tools(options, config)).check_runnable(
            loaded.agent, options, source=str(loaded.agent_path))
    agent = loaded.agent
    # Code steps run only in the config's sandbox: refused by a config without one,
    # said (a warning) when no config is in play at all (agent_runtime/sandbox).
    sandbox_warnings = [] if host_check else _code_step_problems(loaded, config, choice)
    # A misspelled {{ name }} renders as "" (as in the reference): said, by field.
    findings = undeclared_references(agent)
    if findings and args.strict:
        first = findings[0]
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        raise ManifestError(f"{first.message}{more}; --strict refuses it",
                            source=str(loaded.agent_path), field=first.field)
    summary: dict[str, Any] = {
        # The reference's summary, field for field...
        "valid": True, "schemaVersion": agent.schema_version,
        **({"id": agent.id} if agent.id else {}), **({"name": agent.name} if agent.name else {}),
        "stepCount": len(agent.steps),
        # ...and what this runtime adds: the file, its kind, its hash, the config.
        "file": str(loaded.path), "kind": "run" if loaded.run else "agent",
        "agent": agent.id or agent.name, "steps": len(agent.steps),
        "manifest_hash": manifest_hash(agent),
        "config": None if choice is None else {**choice.to_json(), "host_checked": host_check},
        "warnings": [{"field": finding.field, "message": finding.message}
                     for finding in findings]
        + [{"field": field, "message": message} for field, message in sandbox_warnings]}
    plan = None
    if args.plan:
        from agent_runtime.execution_plan import plan_json  # noqa: PLC0415 - asked for only

        plan = plan_json(loaded, config)
        summary["plan"] = plan
    out = guarded(sys.stdout)
    if args.format == "json":
        from agent_runtime.cli.reports import to_json_text  # noqa: PLC0415 - json output only

        print(to_json_text(summary), file=out)
    else:
        print(printable(f"ok: {summary['file']} ({summary['kind']} manifest, agent "
                        f"{summary['agent'] or '-'}, {summary['steps']} top-level steps, "
                        f"{summary['manifest_hash']})", multiline=False), file=out)
        if choice is not None:
            checked = "" if host_check else (
                "; this host's models, keys and tools are checked with --config, --model "
                "or --tools")
            print(printable(f"runtime config: {choice.describe()}{checked}",
                            multiline=False), file=out)
        if plan is not None:
            from agent_runtime.execution_plan import print_plan  # noqa: PLC0415

            print_plan(plan, out)
    for finding in findings:
        print(printable(f"warning: {loaded.agent_path}: {finding.field}: {finding.message}",
                        multiline=False), file=guarded(sys.stderr))
    for field, message in sandbox_warnings:
        print(printable(f"warning: {loaded.agent_path}: {field}: {message}",
                        multiline=False), file=guarded(sys.stderr))
    return EXIT_COMPLETED


def _code_step_problems(loaded: LoadedManifest, config: RuntimeConfig | None,
                        choice: ConfigChoice | None) -> list[tuple[str, str]]:
    """The code steps the runtime config cannot run: refused (`ConfigError`, the
    first, by field) when a config is in play, else returned to be warned about."""
    from agent_runtime.manifest import CodeStep, iter_steps  # noqa: PLC0415

    if not any(isinstance(step, CodeStep)
               for _, step in iter_steps(loaded.agent.steps, into_sub_runs=True)):
        return []  # the common case, without loading the sandbox's modules
    from agent_runtime.sandbox.selection import manifest_code_problems  # noqa: PLC0415

    problems = manifest_code_problems(loaded.agent, config.sandbox if config else None)
    if problems and choice is not None:
        from agent_runtime.errors import ConfigError  # noqa: PLC0415

        field, message = problems[0]
        raise ConfigError(f"{message} ({choice.describe()})", source=str(loaded.agent_path),
                          field=field)
    return [(field, f"{message}; a run here fails at this step") for field, message in problems]


def cmd_config_validate(args: argparse.Namespace) -> int:
    from agent_runtime.config import load_config  # noqa: PLC0415

    if args.file is None:
        found = find_config()
        if found is None:
            raise NotFound(f"no {', '.join(CONFIG_NAMES)} in the current directory: name the "
                           "file to check", source="config validate")
        args.file = found.path.name
    config = load_config(args.file)
    if config.policy is not None:
        from agent_runtime.policy import PolicyHooks  # noqa: PLC0415

        PolicyHooks(config.policy, source=args.file)  # its hooks import, or name the field
    for manifest_file in args.manifest:
        from agent_runtime.sandbox.selection import manifest_code_problems  # noqa: PLC0415

        loaded = load_manifest(manifest_file)
        problems = manifest_code_problems(loaded.agent, config.sandbox)
        if problems:
            raise ManifestError(f"{problems[0][1]} (runtime config {args.file})",
                                source=str(loaded.agent_path), field=problems[0][0])
    summary = {"valid": True, "version": config.version,  # the reference's fields, then ours
               "providerCount": len(config.providers), "modelCount": len(config.models),
               "connectionCount": len(config.connections),
               "file": args.file, "providers": sorted(config.providers),
               "models": sorted(config.models), "tools": sorted(config.tools),
               "store": config.store,
               "sandbox": None if config.sandbox is None else config.sandbox.adapter,
               "policy": None if config.policy is None
               else config.policy.model_dump(mode="json", by_alias=True)}
    out = guarded(sys.stdout)
    if args.format == "json":
        from agent_runtime.cli.reports import to_json_text  # noqa: PLC0415 - json output only

        print(to_json_text(summary), file=out)
    else:
        print(printable(f"ok: {args.file} ({len(config.providers)} providers, "
                        f"{len(config.models)} model profiles, {len(config.tools)} tools"
                        + (f", store {config.store}" if config.store else "")
                        + (", a host policy" if config.policy else "") + ")",
                        multiline=False), file=out)
    return EXIT_COMPLETED
