"""Safe deploys (docs/design.md section 10), read from template.yaml and run under moto:
every function is published as versions behind its `live` alias and deployed
gradually, rolled back by an alarm on the new version's errors; the state
machine invokes the aliases only, and CodeDeploy's role moves those aliases
and nothing else.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_stack import DEFINITION, Deployment
from grants import as_list, functions, grants
from moto.awslambda_simple.models import LambdaSimpleBackend
from test_template import _statements

from agent_runtime import RunStatus
from functions.executions import execution_name
from tests.stores.aws.aws_template import ACCOUNT, REGION, load_template

ALIAS = "live"
# CodeDeploy's predefined Lambda configurations that shift traffic gradually
# (not AllAtOnce).
GRADUAL = {f"Canary10Percent{minutes}Minutes" for minutes in (5, 10, 15, 30)} | {
    f"Linear10PercentEvery{every}" for every in ("1Minute", "2Minutes", "3Minutes",
                                                 "10Minutes")}
MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"


def properties(name: str) -> dict[str, Any]:
    props: dict[str, Any] = load_template()["Resources"][name]["Properties"]
    return props


def _dimensions(alarm: dict[str, Any]) -> dict[str, Any]:
    return {entry["Name"]: entry["Value"] for entry in alarm["Dimensions"]}


def _window_seconds(kind: str) -> int:
    """How long a deployment of `kind` runs before all traffic is on the new version."""
    minutes = int(re.findall(r"\d+", kind)[-1])
    # A canary waits once; a linear shift waits between each of its 10 steps.
    return minutes * 60 * (9 if kind.startswith("Linear") else 1)


def _lambda_tasks(definition: dict[str, Any]) -> dict[str, str]:
    """Each Lambda task state of the definition: the function it invokes."""
    tasks = {}
    for name, state in definition["States"].items():
        if state["Type"] != "Task":
            continue
        resource = state["Resource"]
        if resource.startswith("arn:aws:states:::lambda:invoke"):
            tasks[name] = state["Parameters"]["FunctionName"]
        else:  # a function ARN as the Resource itself
            tasks[name] = resource
    return tasks


@pytest.mark.parametrize("function", functions())
def test_every_function_has_an_alias_and_a_gradual_deployment_rolled_back_by_alarm(
        function: str) -> None:
    props = properties(function)
    assert props["AutoPublishAlias"] == ALIAS
    # A change to the layer (the engine) or the environment publishes too.
    assert props["AutoPublishAliasAllProperties"] is True
    preference = props["DeploymentPreference"]
    assert preference["Type"] in GRADUAL
    assert preference.get("Enabled", True) is True
    assert preference["Role"] == {"Fn::GetAtt": ["DeployRole", "Arn"]}
    (alarm,) = preference["Alarms"]
    # The alarm watches errors of the version being deployed, on this alias.
    watched = properties(alarm["Ref"])
    assert (watched["Namespace"], watched["MetricName"]) == ("AWS/Lambda", "Errors")
    assert _dimensions(watched) == {
        "FunctionName": {"Ref": function},
        "Resource": {"Fn::Sub": f"${{{function}}}:{ALIAS}"},
        "ExecutedVersion": {"Fn::GetAtt": [function, "Version.Version"]}}
    assert (watched["DatapointsToAlarm"], watched["EvaluationPeriods"]) == (2, 3)
    # It can fire (its periods, and a minute or two of metric delay) before
    # the last of the traffic moves.
    assert _window_seconds(preference["Type"]) >= (
        watched["Period"] * watched["EvaluationPeriods"] + 120)


def test_the_state_machine_invokes_the_functions_aliases_and_may_invoke_nothing_else() -> None:
    machine = properties("RunStateMachine")
    substitutions = machine["DefinitionSubstitutions"]
    tasks = _lambda_tasks(json.loads(DEFINITION.read_text()))
    assert set(tasks) == {"Advance"}
    invoked = []
    for state, target in tasks.items():
        placeholder = re.fullmatch(r"\$\{(\w+)\}", target)
        assert placeholder is not None, (state, target)
        reference = substitutions[placeholder.group(1)]["Ref"]
        function, _, attribute = reference.partition(".")
        assert attribute == "Alias", (state, reference)
        assert properties(function)["AutoPublishAlias"] == ALIAS, state
        invoked.append(reference)
    assert invoked == ["AdvanceFunction.Alias"]

    # Its role may invoke that alias (not $LATEST, not a version), Advance's
    # the code runners' aliases (code steps), and no other role in the stack
    # may invoke a function.
    invokers = {name: statement for name, statement in _statements(load_template())
                if "lambda:InvokeFunction" in as_list(statement["Action"])}
    assert sorted(invokers) == ["AdvanceRole", "RunStateMachineRole"]
    expected = {"RunStateMachineRole": sorted(invoked),
                "AdvanceRole": ["CodeRunnerJavaScriptFunction.Alias",
                                "CodeRunnerPythonFunction.Alias"]}
    for name, statement in invokers.items():
        assert as_list(statement["Action"]) == ["lambda:InvokeFunction"], name
        assert sorted(resource["Ref"] for resource in as_list(statement["Resource"])) == \
            expected[name], name


def test_outputs_name_the_aliases_not_latest() -> None:
    outputs = load_template()["Outputs"]
    assert outputs["StartFunctionArn"]["Value"] == {"Ref": "StartFunction.Alias"}
    assert outputs["ReconcilerFunctionArn"]["Value"] == {"Ref": "ReconcilerFunction.Alias"}


def test_codedeploy_may_move_these_aliases_and_read_alarms_only() -> None:
    role = properties("DeployRole")
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "codedeploy.amazonaws.com"}
    assert "ManagedPolicyArns" not in role  # not AWSCodeDeployRoleForLambda
    by_action = {action: grant for grant in grants("DeployRole") for action in grant.actions}
    assert set(by_action) == {"lambda:GetAlias", "lambda:UpdateAlias",
                              "lambda:GetProvisionedConcurrencyConfig",
                              "cloudwatch:DescribeAlarms"}
    expected = {resource for function in functions() for resource in (
        json.dumps({"Fn::GetAtt": [function, "Arn"]}),
        json.dumps({"Fn::Sub": f"${{{function}.Arn}}:{ALIAS}"}))}
    for action in ("lambda:GetAlias", "lambda:UpdateAlias"):
        assert {json.dumps(resource) for resource in by_action[action].resources} == expected
    assert by_action["cloudwatch:DescribeAlarms"].resources == ({"Fn::Sub": (
        "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:*")},)


def test_a_new_stack_starts_without_the_former_status_index() -> None:
    template = load_template()
    assert template["Parameters"]["KeepFormerStatusIndex"]["Default"] == "false"
    assert template["Conditions"]["KeepsFormerStatusIndex"] == {
        "Fn::Equals": [{"Ref": "KeepFormerStatusIndex"}, "true"]}


def test_the_deployed_state_machine_runs_through_the_aliases(
        deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    stack = deployment.stack
    definition = json.loads(stack.stepfunctions.describe_state_machine(
        stateMachineArn=stack.state_machine_arn)["definition"])
    function_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:"
    assert _lambda_tasks(definition) == {"Advance": f"{function_arn}AdvanceFunction:{ALIAS}"}

    invoked: list[tuple[str, str | None]] = []
    serve = LambdaSimpleBackend.invoke

    def recording(backend: Any, function_name: str, qualifier: str | None,
                  *rest: Any) -> Any:
        invoked.append((function_name, qualifier))
        return serve(backend, function_name, qualifier, *rest)

    monkeypatch.setattr(LambdaSimpleBackend, "invoke", recording)
    run_id = deployment.services.runtime().create_run(
        manifest=MANIFESTS / "hello.agent.yaml", options={"model": "scripted/echo"}).run_id
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    by_machine = [name for name, _ in invoked if name != "StartFunction"]
    assert by_machine == [f"{function_arn}AdvanceFunction:{ALIAS}"]

