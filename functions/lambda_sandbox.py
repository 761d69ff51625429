"""The AWS sandbox: a `SandboxAdapter` that runs a code step in the stack's code-runner Lambda.

One function per language (template.yaml: `CodeRunnerPythonFunction`,
`CodeRunnerJavaScriptFunction`), named to Advance by its environment
(`AGENT_RUNTIME_CODE_RUNNER_PYTHON`, `..._JAVASCRIPT`: their aliases), each
with a role that grants the code nothing, no network egress and its
own reserved concurrency and timeout; functions/code_runner/ is its handler
and docs/sandbox.md what it guarantees.

The request carries the step's source, its variables (as the JSON file the
code reads), its allowed `environment`, its timeout and the config's limits;
the answer maps onto the local adapter's `SandboxResult` (exit code, stdout,
stderr, the limit that ended it). An invocation that Lambda itself ended at
the function's timeout is the step's timeout; one Lambda refused for the
function's concurrency (the code never started) is tried again, a few times.
Nothing else is retried: the code may have run.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from agent_runtime.js_json import js_json
from agent_runtime.sandbox.contract import SandboxRequest, SandboxResult, SandboxUnavailable
from agent_runtime.sandbox.settings import SandboxSettings
from stores import aws_clients

if TYPE_CHECKING:
    from mypy_boto3_lambda.client import LambdaClient

VERSION = 1
LIMITS = frozenset({"timeout", "output", "cpu"})
# Throttled invocations (the function at its reserved concurrency) never ran
# the code: tried again after 0.5, 1, 2, 4 s, then the step fails.
THROTTLE_RETRIES = 4
THROTTLE_FIRST_WAIT_SECONDS = 0.5
KILLED = -9
# A response read waits for the whole run: the function's timeout and then some.
READ_MARGIN_SECONDS = 30
# The runner keeps this much of its timeout to answer (functions/code_runner/app.py),
# and a cold start takes some too.
RUNNER_MARGIN_SECONDS = 10


def with_code_runners(settings: SandboxSettings | None, *,
                      runner_timeout_seconds: float) -> SandboxSettings:
    """The sandbox settings a stack with code runners uses: the config's `adapter:
    lambda` section, or the defaults when the config has none; a step's timeout
    is capped below the runner function's own."""
    chosen = settings or SandboxSettings(adapter="lambda")
    cap_ms = max(1, int((runner_timeout_seconds - RUNNER_MARGIN_SECONDS) * 1000))
    return chosen.model_copy(update={"max_timeout_ms": min(chosen.max_timeout_ms, cap_ms),
                                     "timeout_ms": min(chosen.timeout_ms, cap_ms)})


def lambda_client(runner_timeout_seconds: float) -> LambdaClient:
    # No retries by botocore: a retried invocation would run the code twice.
    config = Config(read_timeout=runner_timeout_seconds + READ_MARGIN_SECONDS,
                    connect_timeout=10, retries={"total_max_attempts": 1})
    client: LambdaClient = aws_clients.client("lambda", config=config)
    return client


class LambdaSandbox:
    """`SandboxAdapter` over the stack's code-runner Lambdas; see the module docstring."""

    def __init__(self, settings: SandboxSettings, runners: Mapping[str, str],
                 client: Callable[[], LambdaClient],
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        self.idempotent = settings.idempotent
        self.runners = dict(runners)
        self._client_factory = client
        self._client: LambdaClient | None = None
        self._sleep = sleep

    def languages(self) -> frozenset[str]:
        return frozenset(self.runners)

    def availability(self) -> str | None:
        # Nothing is probed: asking would need the function's invoke permission
        # where only the API validates, and an invocation costs a run.
        return None if self.runners else "this stack names no code-runner function"

    def _request(self, request: SandboxRequest) -> bytes:
        settings = self.settings
        settings.check_environment(request)
        return json.dumps({
            "version": VERSION, "language": request.language, "code": request.code,
            "variables": js_json(dict(request.variables)),
            "environment": dict(request.environment), "timeout_ms": request.timeout_ms,
            "limits": {"memory_mb": settings.memory_mb, "cpu_seconds": settings.cpu_seconds,
                       "max_processes": settings.max_processes,
                       "max_file_bytes": settings.max_file_bytes,
                       "max_output_bytes": settings.max_output_bytes}}).encode()

    async def execute(self, request: SandboxRequest) -> SandboxResult:
        function = self.runners.get(request.language)
        if function is None:
            raise SandboxUnavailable(f"step {request.step_path}: no code runner for language "
                                     f"{request.language!r} in this stack")
        payload = self._request(request)
        # Cancelled (a slice's end), the invocation runs on to its end in Lambda:
        # the step's outcome is then unknown, as the effect semantics say.
        return await asyncio.to_thread(self._invoke, function, payload)

    def _invoke(self, function: str, payload: bytes) -> SandboxResult:
        if self._client is None:
            self._client = self._client_factory()
        wait = THROTTLE_FIRST_WAIT_SECONDS
        for attempt in range(THROTTLE_RETRIES + 1):
            try:
                answer = self._client.invoke(FunctionName=function, Payload=payload)
                break
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                if code == "TooManyRequestsException" and attempt < THROTTLE_RETRIES:
                    self._sleep(wait)
                    wait *= 2
                    continue
                raise SandboxUnavailable(f"the code runner {function} could not be invoked "
                                         f"({code or 'error'})") from None
            except BotoCoreError as error:
                # No answer (a read timeout, a dropped connection): the code may have run.
                raise SandboxUnavailable(f"the code runner {function} gave no answer "
                                         f"({type(error).__name__})") from None
        body = answer["Payload"].read()
        return _result(function, answer.get("FunctionError"), body)


def _result(function: str, function_error: str | None, body: bytes) -> SandboxResult:
    try:
        decoded: Any = json.loads(body)
    except ValueError:
        decoded = None
    if function_error is not None:
        kind = decoded.get("errorType", "") if isinstance(decoded, dict) else ""
        message = decoded.get("errorMessage", "") if isinstance(decoded, dict) else ""
        # Lambda ended the invocation at the function's timeout: the code's time ran out.
        if "Task timed out" in str(message) or kind == "Sandbox.Timedout":
            return SandboxResult(exit_code=KILLED, stdout="", stderr="", limit="timeout")
        if kind == "Runtime.OutOfMemory":
            return SandboxResult(exit_code=KILLED, stdout="", stderr="", limit="memory")
        # Never the message: it is the runner's (or the code's) text.
        raise SandboxUnavailable(f"the code runner {function} failed "
                                 f"({kind or function_error})")
    try:
        if not isinstance(decoded, dict) or decoded.get("version") != VERSION:
            raise ValueError("version")
        exit_code = decoded["exit_code"]
        limit = decoded["limit"]
        if not isinstance(exit_code, int) or (limit is not None and limit not in LIMITS):
            raise ValueError("exit_code or limit")
        stdout = base64.b64decode(decoded["stdout"], validate=True)
        stderr = base64.b64decode(decoded["stderr"], validate=True)
    except (KeyError, TypeError, ValueError, binascii.Error):
        raise SandboxUnavailable(f"the code runner {function} answered in a form this "
                                 f"runtime does not read (version {VERSION} expected)") from None
    return SandboxResult(exit_code=exit_code, stdout=stdout.decode("utf-8", "replace"),
                         stderr=stderr.decode("utf-8", "replace"), limit=limit)
