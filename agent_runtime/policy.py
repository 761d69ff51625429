"""The host policy: what any manifest of a run tree may make this host do.

A host that takes manifests from tenants (`agent-runtime serve`, the API
Lambda) cannot trust any of them, at any depth: an inline sub-run's own
`model`, a `manifestRef`'s file, a fork's or a resume's options. The policy
is one object, from the runtime config's `policy:` section, asked wherever a
manifest picks a model, a script file, a tool, a connection or a size:

* before a run is created, for every manifest of its tree
  (`HostServices.check_runnable`), and again where a child starts;
* where the thing is used: resolving a step's model, loading a scripted
  model's script, resolving a step's tools, starting a loop, recording a
  step's output, starting or resuming with a budget.

    policy:
      providers: [openai, local]    # providers a manifest may name (default: any)
      models: ["openai/gpt-5*"]     # PROVIDER/MODEL globs a step may use (default: any)
      profiles: [fast]              # model profiles it may pick (default: all of `models:`)
      requireProfiles: false        # true: models only by {ref: PROFILE}
      scripted: echo                # echo (default) | none | any
      scriptFiles: [demo.yaml]      # with echo: the only script files it may read
      maxLoopIterations: 1000       # one loop's maxIterations, or its items
      maxSteps: 500                 # steps one manifest declares (loop children included)
      maxTotalTokens: 1000000       # a run's token budget; a run with none gets this one
      maxStepOutputBytes: 1048576   # JSON bytes of one step's output
      maxRunOutputBytes: 8388608    # JSON bytes of all step outputs of one run
      maxConcurrentRuns: 8          # per tenant: runs created and not yet finished
      runsPerMinute: 60             # per tenant: runs created in any 60 seconds
      connections: [documents]      # MCP connections it may bind (default: the config's)
      tools: [lookup_order]         # tools a step may name (default: any the host has)
      authorizeTool: "hooks:may_use_tool"            # (tool, tenant) -> bool
      authorizeConnection: "hooks:may_use_connection"  # (alias, connection, tenant) -> bool

Every limit takes `null` for "no limit". `serve` and the API Lambda use the
config's policy, or without one these defaults (`HostPolicy()`); the CLI,
whose user runs their own manifests, is permissive without one
(`HostPolicy.permissive()`).

Refusals name the field, the rule and the limit; they never carry what a
file held (a script file that cannot be read is named, with the kind of
problem only).
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_runtime.errors import ConfigError

__all__ = ["HostPolicy", "PolicyHooks"]

MIB = 1024 * 1024
# The ceiling of every count and size: what JSON and every store keep exactly.
_MAX = 2**53 - 1
ScriptedMode = Literal["echo", "none", "any"]


class HostPolicy(BaseModel):
    """The `policy:` section of the runtime config (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    providers: list[str] | None = None
    models: list[str] | None = None
    profiles: list[str] | None = None
    require_profiles: bool = Field(default=False, alias="requireProfiles")
    scripted: ScriptedMode = "echo"
    script_files: list[str] = Field(default_factory=list, alias="scriptFiles")
    max_loop_iterations: int | None = Field(default=1000, ge=1, le=_MAX,
                                            alias="maxLoopIterations")
    max_steps: int | None = Field(default=500, ge=1, le=_MAX, alias="maxSteps")
    max_total_tokens: int | None = Field(default=1_000_000, ge=1, le=_MAX,
                                         alias="maxTotalTokens")
    max_step_output_bytes: int | None = Field(default=MIB, ge=1024, le=_MAX,
                                              alias="maxStepOutputBytes")
    max_run_output_bytes: int | None = Field(default=8 * MIB, ge=1024, le=_MAX,
                                             alias="maxRunOutputBytes")
    max_concurrent_runs: int | None = Field(default=8, ge=1, le=_MAX, alias="maxConcurrentRuns")
    runs_per_minute: int | None = Field(default=60, ge=1, le=_MAX, alias="runsPerMinute")
    connections: list[str] | None = None
    tools: list[str] | None = None
    authorize_tool: str | None = Field(default=None, alias="authorizeTool")
    authorize_connection: str | None = Field(default=None, alias="authorizeConnection")

    @field_validator("authorize_tool", "authorize_connection")
    @classmethod
    def _target(cls, value: str | None) -> str | None:
        if value is not None and (":" not in value or value.startswith(":")
                                  or value.endswith(":")):
            raise ValueError("a hook is named as \"module:function\"")
        return value

    @classmethod
    def permissive(cls) -> HostPolicy:
        """No limits and any scripted model: the CLI's, for a user running their own files."""
        return cls(scripted="any", max_loop_iterations=None, max_steps=None,
                   max_total_tokens=None, max_step_output_bytes=None,
                   max_run_output_bytes=None, max_concurrent_runs=None, runs_per_minute=None)

    # -- models ----------------------------------------------------------------

    def model_refusal(self, provider: str, model: str, *, driver: str | None,
                      profile: str | None, base_dir: Path) -> str | None:
        """Why a step may not use `provider`/`model` (reached through `profile`, if any);
        a scripted model's script path is relative to `base_dir`."""
        if driver == "scripted":
            return self._scripted_refusal(model, base_dir)
        if profile is None and self.require_profiles:
            return ("this host runs models only through its profiles: use "
                    "model: {ref: PROFILE} (policy.requireProfiles)")
        if profile is not None and self.profiles is not None and profile not in self.profiles:
            return f"model profile {profile!r} is not allowed on this host (policy.profiles)"
        if self.providers is not None and provider not in self.providers:
            return f"model provider {provider!r} is not allowed on this host (policy.providers)"
        if self.models is not None and not any(
                fnmatch.fnmatchcase(f"{provider}/{model}", pattern) for pattern in self.models):
            return (f"model {provider}/{model} is not allowed on this host "
                    "(policy.models)")
        return None

    def _scripted_refusal(self, model: str, base_dir: Path) -> str | None:
        if self.scripted == "none":
            return "the scripted model is not available on this host (policy.scripted: none)"
        if model == "echo" or self.script_allowed(base_dir / model, base_dir):
            return None
        # The script's name is not echoed: it is a path on this host.
        return ("a scripted model's script is a file on this host; only scripted/echo and "
                "the host's listed policy.scriptFiles are allowed")

    def script_allowed(self, path: Path, base_dir: Path) -> bool:
        """Whether the scripted model may read the script at `path` (absolute)."""
        if self.scripted == "any":
            return True
        if self.scripted == "none":
            return False
        resolved = _resolved(path)
        return any(_resolved(base_dir / listed) == resolved for listed in self.script_files)

    # -- sizes -----------------------------------------------------------------

    def iterations_refusal(self, iterations: int) -> str | None:
        """Why a loop may not run `iterations` times on this host."""
        if self.max_loop_iterations is None or iterations <= self.max_loop_iterations:
            return None
        return (f"a loop of {iterations:,} iterations is more than this host allows "
                f"({self.max_loop_iterations:,}, policy.maxLoopIterations)")

    def output_refusal(self, step_bytes: int, run_bytes: int) -> str | None:
        """Why a step's output of `step_bytes` (JSON), bringing the run's outputs to
        `run_bytes`, may not be kept on this host."""
        if self.max_step_output_bytes is not None and step_bytes > self.max_step_output_bytes:
            return (f"the step's output is {step_bytes:,} bytes, more than this host allows "
                    f"({self.max_step_output_bytes:,}, policy.maxStepOutputBytes)")
        if self.max_run_output_bytes is not None and run_bytes > self.max_run_output_bytes:
            return (f"the run's step outputs reach {run_bytes:,} bytes, more than this host "
                    f"allows ({self.max_run_output_bytes:,}, policy.maxRunOutputBytes)")
        return None

    def budget_refusal(self, max_total_tokens: int | None) -> str | None:
        if self.max_total_tokens is None or max_total_tokens is None \
                or max_total_tokens <= self.max_total_tokens:
            return None
        return (f"a token budget of {max_total_tokens:,} is more than this host allows "
                f"({self.max_total_tokens:,}, policy.maxTotalTokens)")

    def budget_for(self, max_total_tokens: int | None) -> int | None:
        """A run's token budget on this host: the one asked for, else the host's cap."""
        return self.max_total_tokens if max_total_tokens is None else max_total_tokens

    # -- tools and connections ---------------------------------------------------

    def tool_refusal(self, name: str, tenant: str | None, hooks: PolicyHooks) -> str | None:
        if self.tools is not None and name not in self.tools:
            return f"tool {name!r} is not allowed on this host (policy.tools)"
        hook = hooks.tool
        if hook is not None and not hook(name, tenant):
            return f"tool {name!r} is not authorized on this host (policy.authorizeTool)"
        return None

    def connection_refusal(self, alias: str, connection: str, tenant: str | None,
                           hooks: PolicyHooks) -> str | None:
        if self.connections is not None and connection not in self.connections:
            return (f"connection {connection!r} is not allowed on this host "
                    "(policy.connections)")
        hook = hooks.connection
        if hook is not None and not hook(alias, connection, tenant):
            return (f"connection {connection!r} is not authorized on this host "
                    "(policy.authorizeConnection)")
        return None


ToolHook = Callable[[str, str | None], bool]
ConnectionHook = Callable[[str, str, str | None], bool]


class PolicyHooks:
    """The policy's `authorizeTool`/`authorizeConnection` callables, imported once.

    A hook that raises refuses: an error in the host's own check must not
    let a call through.
    """

    def __init__(self, policy: HostPolicy, *, source: str = "runtime config") -> None:
        self.tool: ToolHook | None = None
        self.connection: ConnectionHook | None = None
        if policy.authorize_tool is not None:
            self.tool = _refusing_on_error(
                _import_hook(policy.authorize_tool, source=source, field="policy.authorizeTool"))
        if policy.authorize_connection is not None:
            self.connection = _refusing_on_error(_import_hook(
                policy.authorize_connection, source=source, field="policy.authorizeConnection"))


def _refusing_on_error(hook: Callable[..., Any]) -> Callable[..., bool]:
    def ask(*args: Any) -> bool:
        try:
            return hook(*args) is True
        except Exception:  # the host's check failed: refuse rather than allow
            return False
    return ask


def _import_hook(target: str, *, source: str, field: str) -> Callable[..., Any]:
    module_name, _, attribute = target.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"cannot import {target!r}: {error}", source=source,
                          field=field) from error
    if not callable(found):
        raise ConfigError(f"{target!r} is not callable", source=source, field=field)
    hook: Callable[..., Any] = found
    return hook


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a loop of links: compare as written
        return path.absolute()
