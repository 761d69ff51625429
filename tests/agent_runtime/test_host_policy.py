"""The host policy is applied to every manifest a run will execute, before the run
exists and again where each thing is used: inline sub-runs at any depth,
`manifestRef` files, run options, resumes and forks of runs started before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from policy_harness import agent, inline_child, opened, parsed, prompt, runtime, scripted_model

from agent_runtime import ToolContext, tool
from agent_runtime.config import parse_config
from agent_runtime.errors import ConfigError, InvalidInput
from agent_runtime.policy import HostPolicy
from agent_runtime.testing import FakeClock
from stores.memory import MemoryRunStore

SECRET = "tenant-b-bearer-token-0123456789abcdef"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file a tenant must never make the host read: it parses as a script."""
    path = tmp_path / "tokens.yaml"
    path.write_text(f"{SECRET}: tenant-b\n", encoding="utf-8")
    return path


def refused(run: Any) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        run()
    return caught.value


def never_read(record: list[tuple[str, str]], path: Path) -> bool:
    return all(Path(target).name != path.name for event, target in record if event == "open")


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_a_scripted_path_at_any_depth_of_inline_sub_runs_is_refused_unread(
        tmp_path: Path, secret: Path, depth: int) -> None:
    host = runtime(tmp_path, HostPolicy())
    manifest = inline_child(agent(prompt(model=scripted_model(secret))), depth)
    with opened() as record:
        error = refused(lambda: host.run_sync(manifest=manifest))
    assert error.field == "steps[0].manifest." * depth + "steps[0].model"
    assert "scriptFiles" in error.reason and SECRET not in error.render()
    assert str(secret) not in error.render()  # the path a tenant chose is not echoed either
    assert never_read(record, secret)
    assert host.store.list_runs().runs == []


def test_a_child_manifest_of_its_own_cannot_use_a_model_its_root_could_not(
        tmp_path: Path, secret: Path) -> None:
    """The parent has no model at all; the child names its own top-level model."""
    child = agent(prompt(), model=scripted_model(secret))
    manifest = inline_child(child, 1)
    assert "model" not in manifest
    error = refused(lambda: runtime(tmp_path, HostPolicy()).run_sync(manifest=manifest))
    assert error.field == "steps[0].manifest.model"  # the child's own top-level model


def test_a_scripted_path_through_a_manifest_ref_is_refused_naming_its_file(
        tmp_path: Path, secret: Path) -> None:
    child = tmp_path / "child.agent.json"
    child.write_text(parsed_json(agent(prompt(model=scripted_model(secret)))), encoding="utf-8")
    parent = agent({"id": "delegate", "type": "sub-run", "manifestRef": "child.agent.json"})
    host = runtime(tmp_path, HostPolicy())
    with opened() as record:
        error = refused(lambda: host.run_sync(manifest=parent))
    assert (error.source, error.field) == (str(child), "steps[0].model")
    assert never_read(record, secret)


def test_a_scripted_path_in_run_options_is_refused(tmp_path: Path, secret: Path) -> None:
    host = runtime(tmp_path, HostPolicy())
    with opened() as record:
        error = refused(lambda: host.run_sync(manifest=agent(prompt()),
                                              options={"model": f"scripted/{secret}"}))
    assert error.field == "steps[0].model"
    assert never_read(record, secret)


def approval_then_prompt() -> dict[str, Any]:
    return agent({"id": "gate", "type": "approval", "prompt": "go?"}, prompt())


def test_resuming_or_forking_a_run_started_under_an_older_policy_reads_no_script(
        tmp_path: Path, secret: Path) -> None:
    """Its remembered options name a script: the policy in force now is asked at use."""
    store, clock = MemoryRunStore(), FakeClock()
    older = runtime(tmp_path, HostPolicy.permissive())
    older.store, older.clock = store, clock
    started = older.run_sync(manifest=approval_then_prompt(),
                             options={"model": f"scripted/{secret}"})
    assert started.status == "suspended"
    older.approve(started.run_id, approved=True)
    now = runtime(tmp_path, HostPolicy())
    now.store, now.clock = store, clock
    with opened() as record:
        error = refused(lambda: now.create_fork(started.run_id))
        resumed = now.run_sync(run_id=started.run_id, resume=True)
    assert error.field == "steps[1].model"
    assert resumed.status == "failed"
    assert resumed.error is not None and resumed.error["type"] == "model_not_allowed"
    assert SECRET not in str(resumed.error) and never_read(record, secret)


def test_a_listed_script_file_runs_and_no_other_does(tmp_path: Path, secret: Path) -> None:
    (tmp_path / "demo.yaml").write_text("responses:\n  - text: scripted hello\n",
                                        encoding="utf-8")
    host = runtime(tmp_path, HostPolicy(script_files=["demo.yaml"]))
    result = host.run_sync(manifest=agent(prompt(model=scripted_model("demo.yaml"))))
    assert (result.status, result.output) == ("completed", "scripted hello")
    error = refused(lambda: host.run_sync(manifest=agent(prompt(model=scripted_model(secret)))))
    assert error.field == "steps[0].model"
    assert refused(lambda: runtime(tmp_path, HostPolicy(scripted="none")).run_sync(
        manifest=agent(prompt(model=scripted_model("echo"))))).field == "steps[0].model"


@pytest.mark.parametrize("content", [
    f"{SECRET}: tenant-b\n",            # a mapping with an unknown first key
    f"responses: [\n  {SECRET}\n",     # not YAML: the parser's message quotes the line
    f"- {SECRET}\n",                    # not a mapping
    f"responses:\n  - {SECRET}: 1\n",   # an entry with an unknown field
])
def test_a_script_that_is_not_one_fails_without_echoing_the_file(
        tmp_path: Path, content: str) -> None:
    """Even for a local user (the permissive policy), a script's error says where
    and what kind of problem, never what the file holds."""
    (tmp_path / "script.yaml").write_text(content, encoding="utf-8")
    result = runtime(tmp_path).run_sync(manifest=agent(prompt(model=scripted_model(
        "script.yaml"))))
    assert result.status == "failed"
    assert SECRET not in str(result.error)
    assert "script.yaml" in str(result.error)


def test_model_providers_models_and_profiles_are_the_hosts_to_allow(tmp_path: Path) -> None:
    config = {"providers": {"local": {"driver": "openai-compatible",
                                      "baseURL": "http://127.0.0.1:9/v1"}},
              "models": {"fast": {"provider": "local", "model": "small"},
                         "big": {"provider": "local", "model": "large"}}}
    def check(policy: HostPolicy, model: dict[str, Any]) -> str | None:
        host = runtime(tmp_path, policy, config)
        try:
            host.check_runnable(parsed(agent(prompt(model=model))), {}, source="m")
        except ConfigError as error:
            assert error.field == "steps[0].model"
            return error.reason
        return None

    direct = {"provider": "local", "model": "small"}
    assert check(HostPolicy(), direct) is None
    assert "policy.providers" in str(check(HostPolicy(providers=["openai"]), direct))
    assert "policy.models" in str(check(HostPolicy(models=["local/large"]), direct))
    assert check(HostPolicy(models=["local/s*"]), direct) is None
    assert "policy.requireProfiles" in str(check(HostPolicy(require_profiles=True), direct))
    assert check(HostPolicy(require_profiles=True), {"ref": "fast"}) is None
    assert "policy.profiles" in str(check(HostPolicy(profiles=["fast"]), {"ref": "big"}))
    # A profile still leads to a provider and model the policy must allow.
    assert "policy.models" in str(check(HostPolicy(models=["local/small"]), {"ref": "big"}))


def test_loop_iterations_and_steps_are_capped_before_a_run_exists(tmp_path: Path) -> None:
    host = runtime(tmp_path, HostPolicy(max_loop_iterations=100, max_steps=3))
    loop = {"id": "many", "type": "loop", "loop": {"maxIterations": 101},
            "steps": [prompt()]}
    error = refused(lambda: host.run_sync(manifest=inline_child(agent(loop), 2)))
    assert error.field == "steps[0].manifest.steps[0].manifest.steps[0].loop.maxIterations"
    assert "policy.maxLoopIterations" in error.reason
    four = agent(*(prompt(f"p{index}") for index in range(4)))
    assert refused(lambda: host.run_sync(manifest=four)).field == "steps"
    assert host.store.list_runs().runs == []


def test_a_loop_over_more_items_than_the_host_allows_fails_naming_the_limit(
        tmp_path: Path) -> None:
    host = runtime(tmp_path, HostPolicy(max_loop_iterations=5))
    loop = {"id": "each", "type": "loop", "loop": {"source": "items"}, "steps": [prompt()]}
    manifest = agent(loop, variables=[{"key": "items", "type": "array",
                                       "value": list(range(6))}])
    result = host.run_sync(manifest=manifest, options={"model": "scripted/echo"})
    assert result.status == "failed" and result.error is not None
    assert "policy.maxLoopIterations" in result.error["message"]


def test_a_token_budget_is_capped_and_a_run_without_one_gets_the_cap(tmp_path: Path) -> None:
    from stores.records import Budget

    host = runtime(tmp_path, HostPolicy(max_total_tokens=1000))
    with pytest.raises(InvalidInput) as caught:
        host.run_sync(manifest=agent(prompt()), budget=Budget(max_total_tokens=1001),
                      options={"model": "scripted/echo"})
    assert caught.value.field == "budget.maxTotalTokens"
    result = host.run_sync(manifest=agent(prompt()), options={"model": "scripted/echo"})
    record = host.store.load_run(result.run_id)
    assert record is not None and record.budget.max_total_tokens == 1000
    with pytest.raises(InvalidInput):
        host.run_sync(run_id=result.run_id, resume=True, budget=Budget(max_total_tokens=5000))


def test_step_and_run_outputs_are_capped(tmp_path: Path) -> None:
    long = {"key": "text", "type": "string", "value": "x" * 2000}
    host = runtime(tmp_path, HostPolicy(max_step_output_bytes=1024))
    result = host.run_sync(manifest=agent(prompt(prompt="{{ text }}"), variables=[long]),
                           options={"model": "scripted/echo"})
    assert result.status == "failed" and result.error is not None
    assert result.error["type"] == "output_too_large"
    assert "policy.maxStepOutputBytes" in result.error["message"]
    host = runtime(tmp_path, HostPolicy(max_run_output_bytes=2048))
    medium = {"key": "text", "type": "string", "value": "y" * 900}
    steps = [prompt(f"p{index}", prompt="{{ text }}") for index in range(3)]
    result = host.run_sync(manifest=agent(*steps, variables=[medium]),
                           options={"model": "scripted/echo"})
    assert result.status == "failed" and result.error is not None
    assert "p2" in result.error["message"] and "policy.maxRunOutputBytes" in \
        result.error["message"]


@tool
def lookup(query: str, ctx: ToolContext) -> str:
    """Look something up."""
    return query


@tool
def delete(query: str, ctx: ToolContext) -> str:
    """Delete something."""
    return query


def test_tools_are_allowed_by_list_and_by_the_hosts_hook(tmp_path: Path) -> None:
    def host(policy: HostPolicy) -> Any:
        made = runtime(tmp_path, policy)
        made.tools.add(lookup)
        made.tools.add(delete)
        return made

    manifest = parsed(agent(prompt(tools=["delete"])))
    options = {"model": "scripted/echo"}
    with pytest.raises(ConfigError, match=r"policy\.tools") as caught:
        host(HostPolicy(tools=["lookup"])).check_runnable(manifest, options, source="m")
    assert caught.value.field == "steps[0].tools"
    hooked = host(HostPolicy(authorize_tool="policy_harness:only_lookup"))
    with pytest.raises(ConfigError, match=r"policy\.authorizeTool"):
        hooked.check_runnable(manifest, options, source="m")
    hooked.check_runnable(parsed(agent(prompt(tools=["lookup"]))), options, source="m")
    with pytest.raises(ConfigError, match=r"policy\.authorizeTool"):
        hooked.check_runnable(parsed(agent(prompt(tools=["lookup"]))), options, source="m",
                              tenant="blocked")
    broken = host(HostPolicy(authorize_tool="policy_harness:broken_hook"))
    with pytest.raises(ConfigError, match=r"policy\.authorizeTool"):  # an error refuses
        broken.check_runnable(parsed(agent(prompt(tools=["lookup"]))), options, source="m")


def test_the_policy_section_of_the_config_is_validated_by_name() -> None:
    config = parse_config({"version": "1.0", "policy": {
        "scripted": "none", "maxLoopIterations": 10, "maxTotalTokens": None}}, source="c.yaml")
    assert config.policy is not None
    assert (config.policy.scripted, config.policy.max_loop_iterations,
            config.policy.max_total_tokens) == ("none", 10, None)
    assert config.policy.max_steps == HostPolicy().max_steps  # unsaid: the safe default
    for bad, field in [({"maxLoop": 1}, "policy.maxLoop"),
                       ({"maxLoopIterations": 0}, "policy.maxLoopIterations"),
                       ({"scripted": "files"}, "policy.scripted"),
                       ({"authorizeTool": "no_colon"}, "policy.authorizeTool")]:
        with pytest.raises(ConfigError) as caught:
            parse_config({"version": "1.0", "policy": bad}, source="c.yaml")
        assert caught.value.field == field


def test_the_cli_is_permissive_without_a_policy_and_serve_is_not(tmp_path: Path,
                                                                  secret: Path) -> None:
    assert runtime(tmp_path).policy == HostPolicy.permissive()
    configured = runtime(tmp_path, config={"policy": {"maxSteps": 7}})
    assert configured.policy.max_steps == 7 and configured.policy.scripted == "echo"


def parsed_json(data: dict[str, Any]) -> str:
    import json

    return json.dumps(data)


def test_connections_are_allowed_by_list_and_by_the_hosts_hook(tmp_path: Path) -> None:
    config = {"connections": {"documents": {
        "driver": "mcp", "transport": "stdio", "command": "python", "tools": ["search"],
        "readTools": ["search"]}}}
    manifest = parsed(agent(prompt(tools=["docs__search"]),
                            connections=[{"ref": "documents", "alias": "docs"}]))
    options = {"model": "scripted/echo"}
    runtime(tmp_path, HostPolicy(), config).check_runnable(manifest, options, source="m")
    for policy, rule in [(HostPolicy(connections=["other"]), "policy.connections"),
                         (HostPolicy(authorize_connection="policy_harness:no_connections"),
                          "policy.authorizeConnection")]:
        with pytest.raises(ConfigError) as caught:
            runtime(tmp_path, policy, config).check_runnable(manifest, options, source="m")
        assert caught.value.field == "connections[0].ref" and rule in caught.value.reason


def test_a_manifest_ref_that_is_not_a_manifest_fails_without_echoing_the_file(
        tmp_path: Path) -> None:
    (tmp_path / "passwd").write_text(f"root:{SECRET}:0:0\n", encoding="utf-8")
    parent = agent({"id": "delegate", "type": "sub-run", "manifestRef": "passwd"})
    result = runtime(tmp_path).run_sync(manifest=parent)
    assert result.status == "failed" and result.error is not None
    assert result.error["type"] == "sub_run_invalid"
    assert SECRET not in str(result.error) and "passwd" in result.error["message"]
