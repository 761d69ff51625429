"""What template.yaml promises about the functions, read from the template itself.

(`make template-check` runs sam validate --lint, cfn-lint, statelint and
asl-validator; these are the project's own rules on top.)
"""

from __future__ import annotations

import importlib
import json
import re
from typing import Any

from aws_stack import DEFINITION, FUNCTION

from tests.stores.aws.aws_template import load_template

SERVICE_ERRORS = {"Lambda.ServiceException", "Lambda.AWSLambdaException",
                  "Lambda.SdkClientException", "Lambda.TooManyRequestsException"}


def resources(kind: str) -> dict[str, dict[str, Any]]:
    return {name: resource for name, resource in load_template()["Resources"].items()
            if resource["Type"] == kind}


def test_functions_run_python_3_13_on_arm64_built_without_docker() -> None:
    defaults = load_template()["Globals"]["Function"]
    assert defaults["Runtime"] == "python3.13" and defaults["Architectures"] == ["arm64"]
    assert "Layers" not in defaults  # each function names its own
    functions = resources(FUNCTION)
    assert set(functions) == {"AdvanceFunction", "StartFunction", "ReconcilerFunction",
                              "ApiFunction", "RetentionFunction", "CodeRunnerPythonFunction",
                              "CodeRunnerJavaScriptFunction"}
    for name, function in functions.items():
        props = function["Properties"]
        assert function["Metadata"]["BuildMethod"] == "makefile", name
        assert props["CodeUri"] == "functions/", name
        module, _, handler = props["Handler"].rpartition(".")
        assert callable(getattr(importlib.import_module(module), handler)), name
        # The engine's functions run on the runtime layer; a code runner's handler
        # needs only the standard library (the javascript one gets node).
        layers = props.get("Layers")
        assert layers == ({"CodeRunnerPythonFunction": None,
                           "CodeRunnerJavaScriptFunction": [{"Ref": "NodeLayer"}]}.get(
                               name, [{"Ref": "RuntimeLayer"}])), name
    for name in ("RuntimeLayer", "NodeLayer"):
        layer = load_template()["Resources"][name]
        assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": "arm64"}
        assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]
        assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]


# Their role grants the code nothing, logs included: they write none
# (tests/functions/test_code_runner_template.py).
CODE_RUNNERS = {"CodeRunnerPythonFunction", "CodeRunnerJavaScriptFunction"}


def test_every_function_logs_to_its_own_group_with_a_retention() -> None:
    template = load_template()
    for name, function in resources(FUNCTION).items():
        if name in CODE_RUNNERS:
            assert "LoggingConfig" not in function["Properties"], name
            continue
        group = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        assert template["Resources"][group]["Properties"]["RetentionInDays"] == {
            "Ref": "LogRetentionDays"}, name
        role = function["Properties"]["Role"]["Fn::GetAtt"][0]
        statements = [statement for policy in template["Resources"][role]["Properties"][
            "Policies"] for statement in policy["PolicyDocument"]["Statement"]]
        assert {"Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": {"Fn::GetAtt": [group, "Arn"]}} in statements, name


def _statements(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        documents = [policy["PolicyDocument"] for policy in props.get("Policies", [])]
        if resource["Type"] in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
            documents.append(props["PolicyDocument"])
        for document in documents:
            for entry in document["Statement"]:
                # A conditional statement: the one granted when the condition holds.
                found.append((name, entry["Fn::If"][1] if "Fn::If" in entry else entry))
    return found


def test_iam_names_its_resources() -> None:
    """No '*' resource, except the log-delivery actions and EC2's describe actions for
    Lambda's own network interfaces, which accept nothing else."""
    log_delivery = {"logs:CreateLogDelivery", "logs:GetLogDelivery", "logs:UpdateLogDelivery",
                    "logs:DeleteLogDelivery", "logs:ListLogDeliveries",
                    "logs:PutResourcePolicy", "logs:DescribeResourcePolicies",
                    "logs:DescribeLogGroups"}
    statements = _statements(load_template())
    assert len(statements) > 10
    for name, statement in statements:
        resource = statement["Resource"]
        listed = resource if isinstance(resource, list) else [resource]
        if "*" in listed and name in ("CodeRunnerRole", "CodeRunnerJavaScriptRole"):
            # Lambda's, never the code's (lambda:SourceFunctionArn is absent).
            assert set(statement["Action"]) == {"ec2:DescribeNetworkInterfaces",
                                                "ec2:DescribeSubnets"}, name
            assert statement["Condition"] == {"Null": {"lambda:SourceFunctionArn": "true"}}
        elif "*" in listed:
            assert set(statement["Action"]) == log_delivery, name
        actions = statement["Action"] if isinstance(statement["Action"], list) \
            else [statement["Action"]]
        assert all(not action.endswith(":*") for action in actions), (name, actions)


def test_the_state_machine_gets_its_functions_and_retries_lambda_service_errors() -> None:
    machine = load_template()["Resources"]["RunStateMachine"]["Properties"]
    definition = DEFINITION.read_text()
    assert set(re.findall(r"\$\{(\w+)\}", definition)) == set(machine["DefinitionSubstitutions"])
    assert machine["Type"] == "STANDARD"
    assert machine["Logging"]["IncludeExecutionData"] is False
    states = json.loads(definition)["States"]
    tasks = {name: state for name, state in states.items() if state["Type"] == "Task"}
    assert set(tasks) == {"Advance"}
    for name, task in tasks.items():
        throttled, service = task["Retry"]
        assert set(throttled["ErrorEquals"]) | set(service["ErrorEquals"]) == SERVICE_ERRORS
        assert throttled["ErrorEquals"] == ["Lambda.TooManyRequestsException"], name
        for retry in (throttled, service):
            assert retry["BackoffRate"] > 1 and retry["MaxAttempts"] > 1, name
        # Throttled past its retries: a Wait, then the same task again, without
        # end (a throttle never fails the execution: docs/design.md section 10).
        (catch,) = task["Catch"]
        assert catch["ErrorEquals"] == ["Lambda.TooManyRequestsException"], name
        assert catch["ResultPath"] is None, name  # the task's input, unchanged
        wait = states[catch["Next"]]
        assert (wait["Type"], wait["Next"]) == ("Wait", name), name
        # Only ids and a status come back from a task.
        assert set(task["ResultSelector"]) == {"run_id.$", "attempt.$", "status.$"}, name


def test_the_resume_rule_and_the_schedule_reach_their_functions() -> None:
    functions = resources(FUNCTION)
    rule = functions["StartFunction"]["Properties"]["Events"]["ResumeRequested"]
    assert rule["Type"] == "EventBridgeRule"
    assert rule["Properties"]["Pattern"] == {"source": ["agent-runtime"],
                                             "detail-type": ["resume-requested"]}
    schedule = functions["ReconcilerFunction"]["Properties"]["Events"]["Schedule"]
    assert schedule["Type"] == "Schedule"
    assert schedule["Properties"]["Schedule"] == {"Ref": "ReconcileSchedule"}
