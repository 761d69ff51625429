"""What a function builds once per container: settings, clients, the store, the runtime.

Settings come from environment variables, which template.yaml sets:

    AGENT_RUNTIME_STORE                   the run store: TABLE?bucket=B&kms_key=K&retention_days=D
                                          (stores/dynamodb/location.py)
    AGENT_RUNTIME_STATE_MACHINE_ARN       the run state machine (start, reconciler)
    AGENT_RUNTIME_EVENT_BUS               the stack's bus: resume-requested and run-finished
                                          events go there (default: default)
    AGENT_RUNTIME_LEASE_SECONDS           an attempt's lease, renewed at every checkpoint (120)
    AGENT_RUNTIME_ADVANCE_MARGIN_SECONDS  Advance stops at a commit point this long before its
                                          Lambda would time out (120)
    AGENT_RUNTIME_MAX_TAKEOVERS           takeovers before a run is suspended as crash-loop (3)
    AGENT_RUNTIME_QUEUED_SECONDS          how long a created run may wait before the
                                          reconciler starts it (60)
    AGENT_RUNTIME_RESUME_GRACE_SECONDS    how old a resume request (or a sub-run's end) is
                                          before the reconciler resumes the run (30)
    AGENT_RUNTIME_MAX_CONCURRENT_RUNS     runs that may be running at once: the start function
                                          and the reconciler leave others queued (0: no limit;
                                          functions/capacity.py)
    AGENT_RUNTIME_CONFIG_PARAMETER        an SSM parameter holding the runtime config (YAML
                                          or JSON; a SecureString is decrypted), or
    AGENT_RUNTIME_CONFIG                  a path to a runtime config file (e.g. in a layer)
    AGENT_RUNTIME_CODE_RUNNER_PYTHON      the code-runner function (its alias) code steps in
                                          python run in (functions/lambda_sandbox.py); with
                                          one, a config without `sandbox:` gets
                                          `adapter: lambda` with the defaults
    AGENT_RUNTIME_CODE_RUNNER_JAVASCRIPT  the same for code steps in javascript
    AGENT_RUNTIME_CODE_RUNNER_TIMEOUT_SECONDS  the code runners' timeout: a step's is capped
                                          below it (300)

The runtime config is the CLI's `--config` (providers, model profiles, MCP
connections, Python tools as `module:function`), read once per container.
Without one a run can use only what needs no config, such as the scripted
model its options name (`{"model": "scripted/echo"}`). A run's remembered
`config` and `tools` options are paths on the machine that started it and are
not used here: in Lambda the function's config decides.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_runtime.clock import Clock, SystemClock
from stores import aws_clients
from stores.dynamodb.location import open_dynamodb_store
from stores.dynamodb.store import DynamoDbRunStore

if TYPE_CHECKING:
    from mypy_boto3_events.client import EventBridgeClient
    from mypy_boto3_stepfunctions.client import SFNClient

    from agent_runtime.config import RuntimeConfig
    from agent_runtime.engine import AgentRuntime
    from agent_runtime.events import EventSink
    from agent_runtime.sandbox.contract import SandboxAdapter

# The engine, its config (and the YAML parser) and its tools load when a path
# first builds a runtime (Advance, the API, the reconciler's resumes): the start
# function never does, so its cold start skips them.

STORE = "AGENT_RUNTIME_STORE"
STATE_MACHINE_ARN = "AGENT_RUNTIME_STATE_MACHINE_ARN"
EVENT_BUS = "AGENT_RUNTIME_EVENT_BUS"
LEASE_SECONDS = "AGENT_RUNTIME_LEASE_SECONDS"
ADVANCE_MARGIN_SECONDS = "AGENT_RUNTIME_ADVANCE_MARGIN_SECONDS"
MAX_TAKEOVERS = "AGENT_RUNTIME_MAX_TAKEOVERS"
QUEUED_SECONDS = "AGENT_RUNTIME_QUEUED_SECONDS"
RESUME_GRACE_SECONDS = "AGENT_RUNTIME_RESUME_GRACE_SECONDS"
MAX_CONCURRENT_RUNS = "AGENT_RUNTIME_MAX_CONCURRENT_RUNS"
CONFIG_PARAMETER = "AGENT_RUNTIME_CONFIG_PARAMETER"
CONFIG_FILE = "AGENT_RUNTIME_CONFIG"
# Languages and the variables that name their code runners (functions/lambda_sandbox.py).
CODE_RUNNERS = {"python": "AGENT_RUNTIME_CODE_RUNNER_PYTHON",
                "javascript": "AGENT_RUNTIME_CODE_RUNNER_JAVASCRIPT"}
CODE_RUNNER_TIMEOUT_SECONDS = "AGENT_RUNTIME_CODE_RUNNER_TIMEOUT_SECONDS"


def _number(name: str, default: float) -> float:
    text = os.environ.get(name, "")
    try:
        return float(text) if text else default
    except ValueError as error:
        raise ValueError(f"environment variable {name} is not a number: {text!r}") from error


@dataclass(frozen=True)
class Settings:
    store_location: str
    state_machine_arn: str
    event_bus: str
    lease_seconds: float
    advance_margin_seconds: float
    max_takeovers: int
    queued_seconds: float
    config_parameter: str
    config_file: str
    resume_grace_seconds: float = 30.0
    max_concurrent_runs: int = 0
    # language -> code-runner function (functions/lambda_sandbox.py); none: no Lambda sandbox.
    code_runners: Mapping[str, str] = field(default_factory=dict)
    code_runner_timeout_seconds: float = 300.0

    @classmethod
    def from_environment(cls) -> Settings:
        location = os.environ.get(STORE, "")
        if not location:
            raise ValueError(f"environment variable {STORE} (the run store) is not set")
        return cls(store_location=location,
                   state_machine_arn=os.environ.get(STATE_MACHINE_ARN, ""),
                   event_bus=os.environ.get(EVENT_BUS) or "default",
                   lease_seconds=_number(LEASE_SECONDS, 120.0),
                   advance_margin_seconds=_number(ADVANCE_MARGIN_SECONDS, 120.0),
                   max_takeovers=int(_number(MAX_TAKEOVERS, 3)),
                   queued_seconds=_number(QUEUED_SECONDS, 60.0),
                   config_parameter=os.environ.get(CONFIG_PARAMETER, ""),
                   config_file=os.environ.get(CONFIG_FILE, ""),
                   resume_grace_seconds=_number(RESUME_GRACE_SECONDS, 30.0),
                   max_concurrent_runs=int(_number(MAX_CONCURRENT_RUNS, 0)),
                   code_runners={language: os.environ[name]
                                 for language, name in CODE_RUNNERS.items()
                                 if os.environ.get(name)},
                   code_runner_timeout_seconds=_number(CODE_RUNNER_TIMEOUT_SECONDS, 300.0))

    def require_state_machine(self) -> str:
        if not self.state_machine_arn:
            raise ValueError(f"environment variable {STATE_MACHINE_ARN} is not set")
        return self.state_machine_arn


@dataclass
class Services:
    """A container's long-lived pieces: built on first use, reused by later invocations."""

    settings: Settings
    store: DynamoDbRunStore
    clock: Clock
    stepfunctions: SFNClient
    events: EventBridgeClient
    _config: RuntimeConfig | None = None

    @classmethod
    def from_environment(cls, *, clock: Clock | None = None) -> Services:
        settings = Settings.from_environment()
        return cls(settings=settings, store=open_dynamodb_store(settings.store_location),
                   clock=clock or SystemClock(), stepfunctions=aws_clients.client("stepfunctions"),
                   events=aws_clients.client("events"))

    @property
    def config(self) -> RuntimeConfig:
        if self._config is None:
            self._config = with_code_runners(load_runtime_config(self.settings), self.settings)
        return self._config

    def sandbox(self, config: RuntimeConfig) -> SandboxAdapter | None:
        """The stack's code runners when the config's sandbox is theirs (`adapter:
        lambda`, or none given); else the config's own choice (None: the runtime's)."""
        if not self.settings.code_runners or config.sandbox is None \
                or config.sandbox.adapter != "lambda":
            return None
        from functions.lambda_sandbox import LambdaSandbox, lambda_client  # noqa: PLC0415

        timeout = self.settings.code_runner_timeout_seconds
        return LambdaSandbox(config.sandbox, self.settings.code_runners,
                             client=lambda: lambda_client(timeout))

    def runtime(self, sinks: Iterable[EventSink] = (), *, owner: str | None = None,
                store: DynamoDbRunStore | None = None,
                kind: Callable[..., AgentRuntime] | None = None) -> AgentRuntime:
        """An AgentRuntime on this container's store (or `store`, the same one held by
        a slice: `DynamoDbRunStore.owned_by`) and config. `owner` (the execution ARN)
        holds the leases of the sub-runs it starts; a run's own attempt is leased by
        its slice (functions/step/ownership.py). `kind` builds it (AgentRuntime, or a
        subclass with its arguments)."""
        from agent_runtime.engine import AgentRuntime  # noqa: PLC0415 - see the imports
        from agent_runtime.policy import HostPolicy  # noqa: PLC0415
        from agent_runtime.tools import configured_tools  # noqa: PLC0415
        from stores.dynamodb.s3 import S3ArtifactStore  # noqa: PLC0415

        blobs = self.store.blobs
        artifacts = None if blobs is None else S3ArtifactStore(
            blobs.bucket, blobs.kms_key_id, client=blobs.client)
        config = self.config
        tools = configured_tools(config, source=config_source(self.settings))
        build = kind or AgentRuntime
        # Tenants' manifests run here: without a `policy:` in the config, the safe defaults.
        return build(store=store or self.store, config=config, tools=tools,
                     policy=config.policy or HostPolicy(), artifacts=artifacts,
                     event_sinks=sinks, clock=self.clock, sandbox=self.sandbox(config),
                     owner=owner, lease_seconds=self.settings.lease_seconds)


@functools.cache
def services() -> Services:
    """This container's services (tests replace this function to inject a clock)."""
    return Services.from_environment()


def load_runtime_config(settings: Settings) -> RuntimeConfig:
    from agent_runtime.config import empty_config  # noqa: PLC0415 - see the imports

    if settings.config_parameter:
        ssm = aws_clients.client("ssm")
        text = ssm.get_parameter(Name=settings.config_parameter,
                                 WithDecryption=True)["Parameter"].get("Value", "")
        return _parse_config_text(text, source=config_source(settings))
    if settings.config_file:
        with open(settings.config_file, encoding="utf-8") as source:
            return _parse_config_text(source.read(), source=config_source(settings))
    return empty_config()


def with_code_runners(config: RuntimeConfig, settings: Settings) -> RuntimeConfig:
    """`config`, its code steps sent to the stack's code runners when it names any
    and the config chose none (a config's `adapter: bubblewrap` stays: it cannot
    run in Lambda, and says so)."""
    if not settings.code_runners:
        return config
    from functions.lambda_sandbox import with_code_runners as runner_settings  # noqa: PLC0415

    if config.sandbox is not None and config.sandbox.adapter != "lambda":
        return config
    sandbox = runner_settings(config.sandbox,
                              runner_timeout_seconds=settings.code_runner_timeout_seconds)
    return config.model_copy(update={"sandbox": sandbox})


def config_source(settings: Settings) -> str:
    """Where this container's runtime config comes from, as errors name it."""
    if settings.config_parameter:
        return f"ssm:{settings.config_parameter}"
    return settings.config_file or "runtime config"


def _parse_config_text(text: str, *, source: str) -> RuntimeConfig:
    import yaml  # noqa: PLC0415 - see the imports

    from agent_runtime.config import parse_config  # noqa: PLC0415

    data: Any = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    return parse_config(data, source=source)
