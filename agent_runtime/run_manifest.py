"""Run manifests and manifest files: what `agent-runtime run FILE` reads.

A manifest file is an agent manifest, or a run manifest (`agent: {ref}`,
variable overrides, execution mode, budget) naming its agent manifest by a
path relative to itself. The agent manifest's models live in
`agent_runtime.manifest`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from agent_runtime.errors import ManifestError
from agent_runtime.manifest import AgentManifest, TrimmedStr, parse_agent_manifest
from agent_runtime.manifest_errors import manifest_error_from_validation
from agent_runtime.manifest_input import (
    SchemaModel,
    check_structure,
    read_document,
    rule_error,
)
from agent_runtime.step_kinds import FILE_SPELLING
from agent_runtime.variables import VariableKey


class VariableOverride(SchemaModel):
    key: VariableKey
    value: Any


class RunAgentRef(SchemaModel):
    ref: TrimmedStr


class RunExecution(SchemaModel):
    mode: Literal["sequential", "parallel"]
    max_concurrency: Annotated[int, Field(ge=1, le=64)] | None = None


# JSON numbers are exact only up to 2**53 - 1 (the reference's `.safe()`).
MAX_SAFE_INTEGER = 2**53 - 1


class RunBudget(SchemaModel):
    max_total_tokens: Annotated[int, Field(ge=1, le=MAX_SAFE_INTEGER)]


class RunManifest(SchemaModel):
    schema_version: Literal["1.0"]
    agent: RunAgentRef
    run_id: TrimmedStr | None = None
    variables: list[VariableOverride] = Field(default_factory=list)
    execution: RunExecution | None = None
    budget: RunBudget | None = None

    @model_validator(mode="after")
    def _unique_overrides(self) -> RunManifest:
        keys: set[str] = set()
        for index, override in enumerate(self.variables):
            if override.key.casefold() in keys:
                raise rule_error(
                    f"duplicate variable override {override.key!r} "
                    "(keys are compared ignoring case)",
                    "variables", index, "key",
                )
            keys.add(override.key.casefold())
        return self


def parse_run_manifest(data: Any, *, source: str) -> RunManifest:
    check_structure(data, source=source)
    try:
        return RunManifest.model_validate(data, by_name=False, context={FILE_SPELLING: True})
    except ValidationError as exc:
        raise manifest_error_from_validation(exc, source=source) from None


def load_agent_manifest(path: str | Path) -> AgentManifest:
    path = Path(path)
    data = read_document(path)
    if "agent" in data and "steps" not in data:
        raise ManifestError("this is a run manifest; expected an agent manifest",
                            source=str(path), field="agent")
    return parse_agent_manifest(data, source=str(path))


@dataclass(frozen=True)
class LoadedManifest:
    """A manifest file as given: an agent manifest, or a run manifest and its agent."""

    path: Path
    agent: AgentManifest
    agent_path: Path
    run: RunManifest | None = None


def load_manifest_file(path: str | Path) -> LoadedManifest:
    """Load an agent manifest or a run manifest (one with an `agent` key) and its agent.

    A run manifest's `agent.ref` is relative to the run manifest's directory.
    """
    path = Path(path)
    data = read_document(path)
    if "agent" not in data:
        return LoadedManifest(path=path, agent=parse_agent_manifest(data, source=str(path)),
                              agent_path=path)
    run = parse_run_manifest(data, source=str(path))
    agent_path = path.parent / run.agent.ref
    if not agent_path.is_file():
        raise ManifestError(f"agent manifest {str(agent_path)!r} not found",
                            source=str(path), field="agent.ref")
    return LoadedManifest(path=path, agent=load_agent_manifest(agent_path),
                          agent_path=agent_path, run=run)
