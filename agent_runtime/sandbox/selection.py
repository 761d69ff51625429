"""The sandbox a runtime runs `code` steps in, chosen by its config, and what it refuses.

No `sandbox:` section, no adapter: every code step is refused by `validate`
(and before a run starts) by name, rather than failing when the run gets
there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_runtime.sandbox.contract import SandboxResult, SandboxUnavailable
from agent_runtime.sandbox.settings import RESERVED_ENVIRONMENT, SandboxSettings

if TYPE_CHECKING:
    from agent_runtime.manifest import AgentManifest, CodeStep
    from agent_runtime.sandbox.contract import SandboxAdapter, SandboxRequest


def manifest_code_problems(manifest: AgentManifest,
                           settings: SandboxSettings | None) -> list[tuple[str, str]]:
    """(field, reason) for each code step of `manifest` (loop bodies and inline
    sub-runs included) the config `settings` cannot run; the machine is not probed."""
    from agent_runtime.manifest import CodeStep, iter_steps  # noqa: PLC0415

    sandbox = build_sandbox(settings)
    problems = []
    for path, step in iter_steps(manifest.steps, into_sub_runs=True):
        if isinstance(step, CodeStep):
            problem = code_step_problem(step, sandbox, settings, probe=False)
            if problem is not None:
                problems.append((f"{path}.{problem[0]}", f"code step {step.id}: {problem[1]}"))
    return problems


def build_sandbox(settings: SandboxSettings | None) -> SandboxAdapter | None:
    """The adapter `settings` selects, or None without a `sandbox:` section. Building
    it runs nothing: bubblewrap is probed when first asked. `adapter: lambda` is
    built by the deployed stack's functions, which know their code runners
    (functions/lambda_sandbox.py); anywhere else it is `ElsewhereOnly`."""
    if settings is None:
        return None
    if settings.adapter == "lambda":
        return ElsewhereOnly(settings)
    from agent_runtime.sandbox.bubblewrap import BubblewrapSandbox  # noqa: PLC0415

    return BubblewrapSandbox(settings)


class ElsewhereOnly:
    """`adapter: lambda` outside the deployed stack: the languages it names are known
    (so `validate` checks the rest of a step), but nothing runs here."""

    def __init__(self, settings: SandboxSettings) -> None:
        self.idempotent = settings.idempotent
        self._languages = frozenset(settings.languages)

    def languages(self) -> frozenset[str]:
        return self._languages

    def availability(self) -> str | None:
        return ("sandbox.adapter lambda runs code steps only in the deployed stack's "
                "functions, through its code-runner Lambdas (docs/sandbox.md); not on this host")

    async def execute(self, request: SandboxRequest) -> SandboxResult:
        raise SandboxUnavailable(self.availability() or "")


def code_step_problem(step: CodeStep, sandbox: SandboxAdapter | None,
                      settings: SandboxSettings | None, *,
                      probe: bool = True) -> tuple[str, str] | None:
    """(field of the step, reason) when this host cannot run `step`, else None.
    `probe`: also ask the adapter whether it can isolate code on this machine."""
    if sandbox is None:
        return ("type", "code steps run only in a sandbox, and the runtime config has no "
                "`sandbox:` section (docs/sandbox.md)")
    if step.language not in sandbox.languages():
        return ("language", f"language {step.language!r} has no sandbox profile here "
                f"(sandbox.languages: {', '.join(sorted(sandbox.languages()))})")
    if settings is None:  # an adapter the host built itself: it checks its own limits
        refusal = sandbox.availability() if probe else None
        return None if refusal is None else ("type", refusal)
    if step.timeout_ms is not None and step.timeout_ms > settings.max_timeout_ms:
        return ("timeoutMs", f"{step.timeout_ms} ms is more than this host allows a code step "
                f"({settings.max_timeout_ms}, sandbox.maxTimeoutMs)")
    for name in sorted(step.environment or {}):
        if name in RESERVED_ENVIRONMENT:
            return ("environment", f"{name} is set by the sandbox itself")
        if name not in settings.allowed_environment:
            return ("environment", f"{name} is not in the host's sandbox.allowedEnvironment")
    refusal = sandbox.availability() if probe else None
    if refusal is not None:
        return ("type", refusal)
    return None
