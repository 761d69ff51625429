"""The seam `code` steps run through: a `SandboxAdapter` takes a request, runs it isolated.

The contract is the reference's (`SandboxRequest` -> `SandboxResult`): the
step's source and its run's variables go in; the sandbox stages the source as
`/workspace/main.<ext>` and the variables as JSON at
`/workspace/variables.json`, and sets `AGENT_VARIABLES_FILE` and
`AGENT_OUTPUT_DIRECTORY` (`/workspace/output`) in an environment that holds
nothing else but the step's allowed `environment`. The exit code, stdout and
stderr come out; the step's output is stdout (the code prints its result).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from agent_runtime.errors import AgentRuntimeError

if TYPE_CHECKING:
    from stores.records import JsonValue

WORKSPACE = "/workspace"
SOURCE_STEM = f"{WORKSPACE}/main"
VARIABLES_FILE = f"{WORKSPACE}/variables.json"
OUTPUT_DIRECTORY = f"{WORKSPACE}/output"


@dataclass(frozen=True)
class SandboxRequest:
    run_id: str
    step_path: str
    language: str
    code: str
    variables: Mapping[str, JsonValue]
    timeout_ms: int
    environment: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SandboxResult:
    """How the code ended. `limit` names the host limit that ended it (`timeout`,
    `output`, ...) when one did; stdout and stderr are what was read, at most the
    output limit each."""

    exit_code: int
    stdout: str
    stderr: str
    limit: str | None = None


class SandboxUnavailable(AgentRuntimeError):
    """The adapter cannot isolate code on this host (no bubblewrap, no user
    namespaces, not Linux). Raised instead of ever running code unsandboxed."""


class SandboxAdapter(Protocol):
    """Runs one code step's source in isolation.

    `availability()` says, without running user code, why this host cannot
    sandbox (a sentence), or None when it can; `validate` asks it.

    `execute(request)` runs the source under the adapter's limits and returns
    how it ended, also when a limit ended it (`SandboxResult.limit`). It never
    runs code outside the sandbox: it raises `SandboxUnavailable` instead.
    Cancelled (a slice's end, a cancelled run), it kills everything the code
    started before the cancellation propagates.

    `languages()` are the `language` values it runs; `idempotent` is the
    host's word that running a step's code twice is harmless (a crash
    mid-step then runs it again instead of suspending the run).
    """

    idempotent: bool

    def languages(self) -> frozenset[str]: ...

    def availability(self) -> str | None: ...

    async def execute(self, request: SandboxRequest) -> SandboxResult: ...
