"""Property: whatever run tree a tenant writes, mixing inline and referenced sub-runs with
any models, tools and loop sizes, nothing the host policy forbids is reached.

Each example is a random tree (up to three levels of sub-runs, inline or by
`manifestRef` files), random models (allowed and forbidden recorders, a
provider reached over the network, scripted echo, a listed script, a secret
file, /dev/zero), random tools and loop sizes around the policy's cap, under
one of several policies. The run is submitted and, when accepted, executed.
The oracle is independent of the policy's code: every model call, tool call,
file open and connect is recorded (an audit hook) and checked against rules
written here.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_harness import opened

from agent_runtime import AgentRuntime, ToolContext, tool
from agent_runtime.config import parse_config
from agent_runtime.errors import InvalidInput
from agent_runtime.models.base import ModelRequest, ModelResponse, ToolCallRequest, Usage
from agent_runtime.policy import HostPolicy
from agent_runtime.testing import FakeClock
from stores.memory import MemoryRunStore

SECRET_NAME = "other-tenant-secret.yaml"
ALLOWED_SCRIPT = "allowed-script.yaml"
CAP = 3  # the policies' maxLoopIterations


@dataclass
class Calls:
    models: list[tuple[str, str]] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)


class RecordingModel:
    """Answers like echo; asks for every tool it is offered once per step."""

    def __init__(self, calls: Calls, provider: str) -> None:
        self.calls, self.provider = calls, provider

    async def generate(self, request: ModelRequest, *, on_text: Any = None) -> ModelResponse:
        self.calls.models.append((self.provider, request.model))
        usage = Usage(input_tokens=1, output_tokens=1)
        if request.tools and request.step_request_index == 1:
            return ModelResponse(tool_calls=[
                ToolCallRequest(call_id=f"c{index}", name=spec.name,
                                arguments={"query": "q"})
                for index, spec in enumerate(request.tools)], usage=usage,
                finish_reason="tool-calls")
        return ModelResponse(text="ok", usage=usage)


def tools_recording(calls: Calls) -> list[Any]:
    @tool
    def lookup(query: str, ctx: ToolContext) -> str:
        """Look something up."""
        calls.tools.append("lookup")
        return query

    @tool
    def delete(query: str, ctx: ToolContext) -> str:
        """Delete something."""
        calls.tools.append("delete")
        return query

    return [lookup, delete]


POLICIES = [
    HostPolicy(max_loop_iterations=CAP, models=["rec/allowed-*", "scripted/*"],
               tools=["lookup"], script_files=[ALLOWED_SCRIPT]),
    HostPolicy(max_loop_iterations=CAP, providers=["scripted"], scripted="echo"),
    HostPolicy(max_loop_iterations=CAP, scripted="none", models=["rec/*"],
               authorize_tool="policy_harness:only_lookup"),
]


def model_allowed(policy_index: int, provider: str, model: str) -> bool:
    """The oracle, written from the policies above, not from the policy's code."""
    if provider == "scripted":
        return (policy_index == 0 and model in ("echo", ALLOWED_SCRIPT)) or (
            policy_index == 1 and model == "echo")
    if policy_index == 0:
        return provider == "rec" and model.startswith("allowed-")
    return policy_index == 2 and provider == "rec"


def tool_allowed(policy_index: int, name: str) -> bool:
    return name == "lookup" or policy_index == 1  # policy 1 names no tools, so any


ALL_MODELS = [
    {"provider": "rec", "model": "allowed-a"}, {"provider": "rec", "model": "forbidden-b"},
    {"provider": "remote", "model": "anything"}, {"provider": "scripted", "model": "echo"},
    {"provider": "scripted", "model": ALLOWED_SCRIPT},
    {"provider": "scripted", "model": SECRET_NAME},
    {"provider": "scripted", "model": "/dev/zero"}, {"ref": "remote-profile"}]
ALL_TOOLS = [[], ["lookup"], ["delete"], ["lookup", "delete"]]


def mostly(allowed: list[Any], everything: list[Any]) -> st.SearchStrategy[Any]:
    """Usually something allowed (so runs are accepted and execute), sometimes anything."""
    return st.one_of(*[st.sampled_from(allowed)] * 5, st.sampled_from(everything))


def allowed_models(policy_index: int) -> list[dict[str, str]]:
    return [model for model in ALL_MODELS if "ref" not in model
            and model_allowed(policy_index, model["provider"], model["model"])]


@st.composite
def prompts(draw: st.DrawFn, name: str, policy_index: int) -> dict[str, Any]:
    step: dict[str, Any] = {"id": name, "type": "prompt", "prompt": "hi"}
    if draw(st.booleans()):
        step["model"] = draw(mostly(allowed_models(policy_index), ALL_MODELS))
    chosen = draw(mostly([tools for tools in ALL_TOOLS
                          if all(tool_allowed(policy_index, name) for name in tools)],
                         ALL_TOOLS))
    if chosen:
        step["tools"] = chosen
    return step


@st.composite
def manifests(draw: st.DrawFn, policy_index: int, depth: int = 0) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["prompt", "loop", "inline", "ref"] if depth < 3
                                    else ["prompt", "loop"]))
        name = f"s{index}"
        if kind == "prompt":
            steps.append(draw(prompts(name, policy_index)))
        elif kind == "loop":
            steps.append({"id": name, "type": "loop",
                          "loop": {"maxIterations": draw(mostly([1, 2, CAP],
                                                                [CAP + 1, 10**12]))},
                          "steps": [draw(prompts("inner", policy_index))]})
        else:
            child = draw(manifests(policy_index, depth + 1))
            key = "manifest" if kind == "inline" else "manifestRef"
            steps.append({"id": name, "type": "sub-run", key: child})
    manifest: dict[str, Any] = {"schemaVersion": "1.0", "id": f"d{depth}", "steps": steps}
    if draw(st.booleans()):
        manifest["model"] = draw(mostly(allowed_models(policy_index), ALL_MODELS))
    return manifest


def write_refs(manifest: dict[str, Any], directory: Path, counter: list[int]) -> dict[str, Any]:
    """The tree with each `manifestRef` child written to its own file in `directory`."""
    steps = []
    for step in manifest["steps"]:
        written = step
        if step["type"] == "sub-run":
            key = "manifest" if "manifest" in step else "manifestRef"
            child = write_refs(step[key], directory, counter)
            if key == "manifestRef":
                counter[0] += 1
                name = f"child{counter[0]}.agent.json"
                (directory / name).write_text(json.dumps(child), encoding="utf-8")
                written = {**step, "manifestRef": name}
            else:
                written = {**step, "manifest": child}
        steps.append(written)
    return {**manifest, "steps": steps}


CONFIG = parse_config({
    "version": "1.0",
    "providers": {"remote": {"driver": "openai-compatible", "baseURL": "http://127.0.0.1:9/v1"}},
    "models": {"remote-profile": {"provider": "remote", "model": "via-profile"}}},
    source="config")


@settings(max_examples=2000, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_no_run_tree_reaches_what_the_policy_forbids(data: st.DataObject) -> None:
    policy_index = data.draw(st.integers(0, len(POLICIES) - 1), label="policy")
    tree = data.draw(manifests(policy_index), label="tree")
    fallback = data.draw(st.sampled_from([None, "rec/allowed-z", "scripted/echo"]),
                         label="fallback")
    directory = Path(tempfile.mkdtemp(prefix="policy-tree-"))
    try:
        (directory / SECRET_NAME).write_text("responses: []\n", encoding="utf-8")
        (directory / ALLOWED_SCRIPT).write_text("responses: []\n", encoding="utf-8")
        manifest = write_refs(tree, directory, [0])
        calls = Calls()
        runtime = AgentRuntime(
            store=MemoryRunStore(), clock=FakeClock(), base_dir=directory, config=CONFIG,
            policy=POLICIES[policy_index], tools=tools_recording(calls),
            models={"rec": RecordingModel(calls, "rec")}, owner="property")
        options = {} if fallback is None else {"model": fallback}
        # Refused before any run (InvalidInput), or run: either way, nothing
        # below may have happened.
        with opened() as record, contextlib.suppress(InvalidInput):
            runtime.run_sync(manifest=manifest, options=options)
        for provider, model in calls.models:
            assert model_allowed(policy_index, provider, model), (provider, model)
        for name in calls.tools:
            assert tool_allowed(policy_index, name), name
        files = [Path(target) for event, target in record if event == "open"]
        assert not any(path.name == SECRET_NAME or str(path) == "/dev/zero" for path in files)
        if policy_index == 2:  # scripted none: no script is read at all
            assert not any(path.name == ALLOWED_SCRIPT for path in files)
        assert [target for event, target in record if event == "socket.connect"] == []
    finally:
        shutil.rmtree(directory, ignore_errors=True)
