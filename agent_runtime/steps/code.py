"""`code` steps: the step's source run in the host's sandbox (agent_runtime.sandbox).

As the reference's: the variables in scope go in as JSON
(`AGENT_VARIABLES_FILE`), the step's `environment` (names the host allows)
is the process environment, `timeoutMs` (default and cap are host settings)
bounds the run. The output is what the code printed on stdout, as printed,
or null when it printed nothing; a non-zero exit, or a host limit reached,
fails the step. Neither stdout nor stderr nor the source is in any event.

Effect semantics: the step's result is an effect under the key
`<runId>:<stepPath>`, reserved in the ledger before the code starts and
recorded when it ends. A run that crashed after recording replays the result
without running the code again. One that crashed while the code ran (outcome
unknown) runs it again only when the host marks the sandbox idempotent
(`sandbox.idempotent`); otherwise the run suspends `effect-unknown`, and an
operator retries, supplies the result or skips (`effects resolve`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from stores.records import EffectStatus, Frame, JsonObject, JsonValue

from agent_runtime.deadlines import CallCut
from agent_runtime.errors import StepFailed, SuspendRun
from agent_runtime.manifest import CodeStep
from agent_runtime.sandbox.contract import SandboxRequest, SandboxUnavailable
from agent_runtime.sandbox.settings import DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS

if TYPE_CHECKING:
    from agent_runtime.execution import Execution
    from agent_runtime.sandbox.contract import SandboxAdapter

# A code step that is not idempotent needs half a slice to start: cut mid-run,
# its outcome would be unknown (as a non-idempotent tool call's).
NON_IDEMPOTENT_SHARE = 0.5

_LIMIT_MESSAGES = {
    "timeout": "ran past its timeout of {timeout_ms} ms and was killed",
    "output": "printed more than the host's output limit (sandbox.maxOutputBytes) and was "
              "killed",
    "cpu": "used more CPU time than the host allows (sandbox.cpuSeconds) and was killed",
}


def _unavailable(frame: Frame, reason: str) -> StepFailed:
    return StepFailed("sandbox_unavailable", f"step {frame.step_path}: {reason}")


class CodeStepExecutor:
    async def execute(self, step: CodeStep, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        sandbox = ctx.sandbox
        if sandbox is None:
            raise _unavailable(frame, "code steps run only in a sandbox, and no sandbox "
                               "adapter is configured for this runtime (the runtime config's "
                               "`sandbox:` section)")
        settings = ctx.runtime.config.sandbox
        default_ms = settings.timeout_ms if settings else DEFAULT_TIMEOUT_MS
        cap_ms = settings.max_timeout_ms if settings else MAX_TIMEOUT_MS
        timeout_ms = step.timeout_ms or default_ms
        if timeout_ms > cap_ms:
            raise StepFailed("code_timeout_not_allowed",
                             f"step {frame.step_path}: timeoutMs {timeout_ms} is more than this "
                             f"host allows ({cap_ms}, sandbox.maxTimeoutMs)")
        key = f"{ctx.run_id}:{frame.step_path}"
        ctx.check_interrupt(before="code step")
        ctx.slice.require_room("code step", step_path=frame.step_path,
                               share=0.0 if sandbox.idempotent else NON_IDEMPOTENT_SHARE)
        effect = await ctx.begin_effect(key)
        if effect.status is EffectStatus.COMPLETED:
            # Run and recorded by an earlier attempt that died before its checkpoint.
            recorded: JsonObject = effect.result
            ctx.events.emit("code.completed", step_id=step.id, step_path=frame.step_path,
                            exit_code=recorded.get("exit_code"), replayed=True)
            return self._settled(recorded, frame)
        if effect.attempt != ctx.attempt:
            resolution = ctx.effect_resolution(key)
            if resolution is not None and resolution["action"] != "retry":
                result: JsonObject = (
                    {"output": resolution.get("result"), "exit_code": None}
                    if resolution["action"] == "result"
                    else {"error": {"type": "skipped",
                                    "message": "an operator skipped this code step"}})
                await ctx.complete_effect(key, result)
                ctx.events.emit("code.completed", step_id=step.id, step_path=frame.step_path,
                                resolved=resolution["action"])
                return self._settled(result, frame)
            if resolution is None and not sandbox.idempotent:
                raise SuspendRun("effect-unknown", {"key": key, "code_step": step.id,
                                                    "step_path": frame.step_path,
                                                    "reserved_by_attempt": effect.attempt})
        result = await self._run(step, frame, ctx, sandbox, key=key, timeout_ms=timeout_ms)
        await ctx.complete_effect(key, result)
        return self._settled(result, frame)

    async def _run(self, step: CodeStep, frame: Frame, ctx: Execution, sandbox: SandboxAdapter,
                   *, key: str, timeout_ms: int) -> JsonObject:
        request = SandboxRequest(run_id=ctx.run_id, step_path=frame.step_path,
                                 language=step.language, code=step.code,
                                 variables=ctx.scope(), timeout_ms=timeout_ms,
                                 environment=step.environment or {})
        ctx.events.emit("code.started", step_id=step.id, step_path=frame.step_path,
                        language=step.language, timeout_ms=timeout_ms)
        started = time.monotonic()
        try:
            outcome = await ctx.bounded(sandbox.execute(request), "code step",
                                        step_path=frame.step_path)
        except SandboxUnavailable as error:
            raise _unavailable(frame, str(error)) from None
        except CallCut as cut:
            if sandbox.idempotent:
                raise  # the next slice runs it again
            raise SuspendRun("effect-unknown", {
                "key": key, "code_step": step.id, "step_path": frame.step_path,
                "reserved_by_attempt": ctx.attempt, "cut_by_slice_end": True}) from cut
        fields = {"exit_code": outcome.exit_code,
                  "stdout_bytes": len(outcome.stdout.encode()),
                  "stderr_bytes": len(outcome.stderr.encode())}
        ctx.events.emit("code.completed", step_id=step.id, step_path=frame.step_path,
                        duration_ms=round((time.monotonic() - started) * 1000),
                        limit=outcome.limit, **fields)
        if outcome.limit is not None:
            message = _LIMIT_MESSAGES.get(outcome.limit, "reached a host limit ({limit})")
            return {"error": {"type": f"code_{outcome.limit}_exceeded"
                              if outcome.limit != "timeout" else "code_timeout",
                              "message": "the code " + message.format(timeout_ms=timeout_ms,
                                                                      limit=outcome.limit)},
                    **fields}
        if outcome.exit_code != 0:
            # As the reference: the exit code, never stderr (it may hold the variables).
            return {"error": {"type": "code_failed",
                              "message": f"the code exited with code {outcome.exit_code}"},
                    **fields}
        return {"output": outcome.stdout or None, **fields}

    @staticmethod
    def _settled(result: JsonObject, frame: Frame) -> JsonValue:
        if "error" in result:
            error = result["error"]
            details = ({"exit_code": result["exit_code"]}
                       if result.get("exit_code") is not None else {})
            raise StepFailed(error["type"], f"step {frame.step_path}: {error['message']}",
                             details)
        output: JsonValue = result["output"]
        return output
