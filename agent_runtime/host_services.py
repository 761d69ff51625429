"""What a host offers its runs: model adapters, tools and MCP connections, and the check
that a manifest asks for nothing else.

`HostServices` is the part of `AgentRuntime` that resolves a step's model and
tools from what the host registered (`models=`, `tools=`) and what its runtime
config allows (model profiles, drivers, connections, webhook destinations).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from stores.records import JsonValue

from agent_runtime.capabilities import ResolvedModel, capability_problem, step_capabilities
from agent_runtime.config import RuntimeConfig
from agent_runtime.errors import ConfigError, StepFailed
from agent_runtime.manifest import (
    AgentManifest,
    CodeStep,
    LoopStep,
    ModelRef,
    ProfileModelRef,
    PromptStep,
    WebhookStep,
    iter_steps,
)
from agent_runtime.models.adapters import ModelAdapters
from agent_runtime.models.base import ModelAdapter
from agent_runtime.models.scripted import ScriptedModel
from agent_runtime.policy import HostPolicy, PolicyHooks
from agent_runtime.run_tree import TreeManifest, iter_run_tree
from agent_runtime.sandbox.selection import code_step_problem
from agent_runtime.steps.subrun import MANIFEST_DIR
from agent_runtime.steps.webhook import destination_refusal
from agent_runtime.tools import ToolRegistry
from agent_runtime.tools.mcp import Grant, McpConnections, connection_grants

if TYPE_CHECKING:
    from agent_runtime.sandbox.contract import SandboxAdapter
    from agent_runtime.step_context import StepContext, StepTool


class HostServices:
    """Models, tools and connections of one runtime, resolved for a run's steps."""

    models: dict[str, ModelAdapter]
    adapters: ModelAdapters  # the config's providers' (shared by runtimes of one config)
    tools: ToolRegistry
    config: RuntimeConfig
    scripted: ScriptedModel
    connections: McpConnections
    policy: HostPolicy
    policy_hooks: PolicyHooks
    base_dir: Path
    sandbox: SandboxAdapter | None

    def adapter_for(self, provider: str) -> ModelAdapter:
        """The adapter serving `provider`: given in `models=`, the scripted model, or a
        driver from the runtime config, built once per `adapters` (a runtime's own, or
        shared by the runtimes a host builds from one config)."""
        if provider in self.models:
            return self.models[provider]
        if self.config.driver_of(provider) == "scripted":
            return self.scripted
        return self.adapters.adapter(provider)

    def resolve_model(self, step_model: ModelRef | None, manifest: AgentManifest,
                      options: Mapping[str, JsonValue]) -> ResolvedModel:
        """A step's model as this host runs it; `StepFailed` when there is none or the
        host policy does not allow it (asked here, where every run's model is picked)."""
        override = options.get("model")
        if override:
            provider, _, model = str(override).partition("/")
            self._check_model(provider, model, profile=None)
            return ResolvedModel(self.adapter_for(provider), provider, model, {})
        ref = step_model or manifest.model
        if ref is None:
            raise StepFailed("no_model", "no model: set `model` in the manifest or the step, "
                             "or pass --model PROVIDER/MODEL")
        if isinstance(ref, ProfileModelRef):
            profile = self.config.models.get(ref.ref)
            if profile is None:
                raise StepFailed("unknown_model_profile",
                                 f"model profile {ref.ref!r} is not defined in the runtime "
                                 "config (--config)")
            self._check_model(profile.provider, profile.model, profile=ref.ref)
            merged = {**(profile.options or {}), **(ref.options or {})}
            capabilities = profile.capabilities
            return ResolvedModel(self.adapter_for(profile.provider), profile.provider,
                                 profile.model, merged,
                                 streaming=capabilities.streaming if capabilities else None,
                                 reasoning=capabilities.reasoning if capabilities else None,
                                 max_input_tokens=capabilities.max_input_tokens
                                 if capabilities else None)
        self._check_model(ref.provider, ref.model, profile=None)
        return ResolvedModel(self.adapter_for(ref.provider), ref.provider, ref.model,
                             dict(ref.options or {}))

    def _check_model(self, provider: str, model: str, *, profile: str | None) -> None:
        driver = (self.config.driver_of(provider) if provider not in self.models
                  else "scripted" if isinstance(self.models[provider], ScriptedModel) else None)
        refusal = self.policy.model_refusal(provider, model, driver=driver, profile=profile,
                                            base_dir=self.base_dir)
        if refusal is not None:
            raise StepFailed("model_not_allowed", refusal)

    def resolve_tools(self, names: Iterable[str], manifest: AgentManifest | None = None, *,
                      tenant: str | None = None) -> dict[str, StepTool]:
        """The tools named by a step: registered Python tools, and `alias__tool` MCP tools
        of the manifest's connections as the runtime config allows them (not yet
        connected: `prepare_tools` does that). A tool of an optional connection the
        host does not define is left out. The host policy is asked for each tool and
        each connection it uses (`StepFailed` naming the rule)."""
        grants: dict[str, Grant | None] = {}
        if manifest is not None and manifest.connections:
            try:
                grants = connection_grants(manifest, self.config, source="manifest")
            except ConfigError as error:
                raise StepFailed("connection_not_allowed", error.render()) from None
            for binding in manifest.connections:
                refusal = self.policy.connection_refusal(
                    binding.effective_alias, binding.ref, tenant, self.policy_hooks)
                if refusal is not None:
                    raise StepFailed("connection_not_allowed", refusal)
        resolved: dict[str, StepTool] = {}
        for name in names:
            refusal = self.policy.tool_refusal(name, tenant, self.policy_hooks)
            if refusal is not None:
                raise StepFailed("tool_not_allowed", refusal)
            found = self.tools.get(name)
            if found is not None:
                resolved[name] = found
                continue
            alias, separator, tool_name = name.partition("__")
            if separator and alias in grants:
                grant = grants[alias]
                if grant is not None:
                    resolved[name] = grant.tool(tool_name, self.connections)
                continue
            if separator:
                raise StepFailed("unknown_tool",
                                 f"tool {name!r} belongs to connection alias {alias!r}, which "
                                 "the manifest does not bind in connections[]")
            raise StepFailed("unknown_tool",
                             f"tool {name!r} is not registered; register it with "
                             "@agent_runtime.tool and --tools FILE.py")
        return resolved

    async def prepare_tools(self, names: Iterable[str],
                            ctx: StepContext) -> dict[str, StepTool]:
        """A step's tools, ready to offer the model: MCP connections opened (once per
        execution) and their tools described by their servers."""
        tools = self.resolve_tools(names, ctx.manifest, tenant=ctx.run.tenant)
        return await self.connections.describe(tools, run_id=ctx.run_id, attempt=ctx.attempt,
                                               events=ctx.events)

    def check_runnable(self, manifest: AgentManifest, options: Mapping[str, JsonValue], *,
                       source: str, tenant: str | None = None) -> None:
        """Refuse, before a run exists, a manifest of its tree (its own, and every
        sub-run's at any depth, inline or by `manifestRef`) whose models, tools,
        connections, webhook destinations, code steps or sizes this host does not allow."""
        for node in iter_run_tree(manifest, source=source, directory=manifest_directory(options),
                                  base_dir=self.base_dir):
            self._check_manifest(node, options, tenant)

    def _check_manifest(self, node: TreeManifest, options: Mapping[str, JsonValue],
                        tenant: str | None) -> None:
        manifest, source = node.manifest, node.source
        connection_grants(manifest, self.config, source=source)
        for index, binding in enumerate(manifest.connections):
            refusal = self.policy.connection_refusal(binding.effective_alias, binding.ref,
                                                     tenant, self.policy_hooks)
            if refusal is not None:
                raise ConfigError(refusal, source=source,
                                  field=node.field(f"connections[{index}].ref"))
        steps = list(iter_steps(manifest.steps))
        if self.policy.max_steps is not None and len(steps) > self.policy.max_steps:
            raise ConfigError(f"the manifest declares {len(steps)} steps (loop children "
                              f"included), more than this host allows ({self.policy.max_steps}, "
                              "policy.maxSteps)", source=source, field=node.field("steps"))
        for path, step in steps:
            if isinstance(step, LoopStep):
                refusal = self.policy.iterations_refusal(step.loop.max_iterations or 1)
                if refusal is not None:
                    raise ConfigError(refusal, source=source,
                                      field=node.field(f"{path}.loop.maxIterations"))
            if isinstance(step, WebhookStep):
                refusal = destination_refusal(step.url, self.config.webhooks)
                if refusal is not None:
                    raise ConfigError(refusal, source=source, field=node.field(f"{path}.url"))
            if isinstance(step, CodeStep):
                problem = code_step_problem(step, self.sandbox, self.config.sandbox)
                if problem is not None:
                    raise ConfigError(f"code step {step.id}: {problem[1]}", source=source,
                                      field=node.field(f"{path}.{problem[0]}"))
            if not isinstance(step, PromptStep):
                continue
            try:
                self.resolve_model(step.model, manifest, options)
            except StepFailed as failure:
                # The manifest's `model`, when the step inherits it; else the step's
                # (its own, or the run's override of it: --model, options.model).
                inherited = step.model is None and not options.get("model")
                raise ConfigError(failure.message, source=source,
                                  field=node.field("model" if inherited
                                                   else f"{path}.model")) from None
            problem = capability_problem(step, step_capabilities(step, manifest, self.config,
                                                                 options.get("model")))
            if problem is not None:
                raise ConfigError(problem[1], source=source,
                                  field=node.field(f"{path}.{problem[0]}"))
            try:
                self.resolve_tools(step.tools or [], manifest, tenant=tenant)
            except StepFailed as failure:
                raise ConfigError(failure.message, source=source,
                                  field=node.field(f"{path}.tools")) from None


def manifest_directory(options: Mapping[str, JsonValue]) -> Path | None:
    """The directory a run's `manifestRef`s are resolved in: its agent manifest's own
    (an inline child's is its parent's), when its manifest came from a file."""
    if options.get(MANIFEST_DIR):
        return Path(str(options[MANIFEST_DIR]))
    if options.get("manifest_path"):
        return Path(str(options["manifest_path"])).parent
    return None
