"""What template.yaml promises about liveness and capacity (docs/design.md section 10):
the stack's own event bus, dead letters, reserved concurrency and tracing, read
from the template itself (the alarms: test_template_alarms.py).
"""

from __future__ import annotations

import json
from typing import Any

from aws_stack import DEFINITION, FUNCTION
from test_template import _statements, resources

from tests.stores.aws.aws_template import load_template


def properties(name: str) -> dict[str, Any]:
    props: dict[str, Any] = load_template()["Resources"][name]["Properties"]
    return props


def test_the_stack_has_its_own_bus_and_the_resume_rule_listens_on_it() -> None:
    template = load_template()
    bus = template["Resources"]["EventBus"]
    assert bus["Type"] == "AWS::Events::EventBus"
    assert bus["Properties"]["Name"] == {"Fn::Sub": "${AWS::StackName}-runs"}
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["AGENT_RUNTIME_EVENT_BUS"] == {"Ref": "EventBus"}
    rule = properties("StartFunction")["Events"]["ResumeRequested"]["Properties"]
    assert rule["EventBusName"] == {"Ref": "EventBus"}
    assert "EventBusName" not in template["Parameters"]
    # Schedules live on the default bus.
    schedule = properties("ReconcilerFunction")["Events"]["Schedule"]["Properties"]
    assert "EventBusName" not in schedule


def test_every_put_events_is_scoped_to_the_stacks_bus_and_source() -> None:
    puts = [(name, statement) for name, statement in _statements(load_template())
            if "events:PutEvents" in (statement["Action"] if isinstance(statement["Action"], list)
                                      else [statement["Action"]])]
    assert {name for name, _ in puts} == {"AdvanceRole", "ApiRole", "ReconcilerRole"}
    for name, statement in puts:
        assert statement["Resource"] == {"Fn::GetAtt": ["EventBus", "Arn"]}, name
        assert statement["Condition"]["StringEquals"]["events:source"] == "agent-runtime", name
    detail_types = {name: statement["Condition"]["StringEquals"]["events:detail-type"]
                    for name, statement in puts}
    # run-finished from the API (a cancel) and the reconciler (a crash-loop suspension) too.
    assert detail_types == {"AdvanceRole": ["resume-requested", "run-finished"],
                            "ApiRole": ["resume-requested", "run-finished"],
                            "ReconcilerRole": "run-finished"}


def test_the_rule_has_a_dead_letter_queue_and_the_start_function_an_on_failure_queue() -> None:
    rule = properties("StartFunction")["Events"]["ResumeRequested"]["Properties"]
    assert rule["DeadLetterConfig"] == {
        "Arn": {"Fn::GetAtt": ["ResumeRequestedDeadLetterQueue", "Arn"]}}
    invoke = properties("StartFunction")["EventInvokeConfig"]
    assert invoke["DestinationConfig"]["OnFailure"] == {
        "Type": "SQS", "Destination": {"Fn::GetAtt": ["StartFailedQueue", "Arn"]}}
    for queue in ("ResumeRequestedDeadLetterQueue", "StartFailedQueue"):
        assert properties(queue)["SqsManagedSseEnabled"] is True, queue
    # EventBridge may send to the dead-letter queue for this rule only.
    (allow,) = [statement for statement in properties(
        "ResumeRequestedDeadLetterQueuePolicy")["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Allow"]
    assert allow["Principal"] == {"Service": "events.amazonaws.com"}
    assert allow["Condition"] == {"ArnEquals": {"aws:SourceArn": {
        "Fn::GetAtt": ["StartFunctionResumeRequested", "Arn"]}}}
    # Lambda sends to the destination with the function's role.
    sends = [statement for name, statement in _statements(load_template())
             if name == "StartRole" and statement["Action"] == "sqs:SendMessage"]
    assert sends == [{"Effect": "Allow", "Action": "sqs:SendMessage",
                      "Resource": {"Fn::GetAtt": ["StartFailedQueue", "Arn"]}}]


def test_advance_is_capped_and_the_reconciler_runs_alone_within_its_schedule() -> None:
    template = load_template()
    assert properties("AdvanceFunction")["ReservedConcurrentExecutions"] == {
        "Ref": "MaxConcurrentRuns"}
    assert template["Parameters"]["MaxConcurrentRuns"]["Default"] >= 1
    reconciler = properties("ReconcilerFunction")
    assert reconciler["ReservedConcurrentExecutions"] == 1
    # EventBridge's shortest schedule is a minute: passes never overlap.
    assert reconciler["Timeout"] < 60


def test_tracing_is_a_parameter_of_the_functions_and_the_state_machine() -> None:
    template = load_template()
    assert template["Parameters"]["Tracing"]["AllowedValues"] == [
        "Active", "PassThrough", "Disabled"]
    assert template["Parameters"]["Tracing"]["Default"] == "Disabled"
    assert template["Globals"]["Function"]["Tracing"] == {"Ref": "Tracing"}
    assert properties("RunStateMachine")["Tracing"] == {
        "Enabled": {"Fn::If": ["TracingActive", True, False]}}
    # Every role that traces may write to X-Ray (the functions have their own roles,
    # so SAM adds nothing).
    xray = {"Fn::If": ["TracingOn", {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/"
                                                 "AWSXRayDaemonWriteAccess"},
                       {"Ref": "AWS::NoValue"}]}
    # A code runner is never traced (its role grants nothing, X-Ray included).
    roles = {function["Properties"]["Role"]["Fn::GetAtt"][0]
             for function in resources(FUNCTION).values()
             if function["Properties"].get("Tracing") != "Disabled"} | {"RunStateMachineRole"}
    assert {name for name, function in resources(FUNCTION).items()
            if function["Properties"].get("Tracing") == "Disabled"} == {
        "CodeRunnerPythonFunction", "CodeRunnerJavaScriptFunction"}
    for role in roles:
        assert xray in properties(role)["ManagedPolicyArns"], role


def test_the_functions_get_their_margins_limits_and_grace_from_the_template() -> None:
    parameters = load_template()["Parameters"]
    margin = parameters["AdvanceMarginSeconds"]
    # Room for at least some work within Advance's 900 s timeout.
    assert margin["MaxValue"] < properties("AdvanceFunction")["Timeout"]
    # Who takes (start, reconciler) and frees (Advance) capacity slots knows how
    # many there are.
    slot_users = ("AdvanceFunction", "StartFunction", "ReconcilerFunction")
    env = {name: properties(name)["Environment"]["Variables"] for name in slot_users}
    assert env["AdvanceFunction"]["AGENT_RUNTIME_ADVANCE_MARGIN_SECONDS"] == {
        "Ref": "AdvanceMarginSeconds"}
    for name in slot_users:
        assert env[name]["AGENT_RUNTIME_MAX_CONCURRENT_RUNS"] == {"Ref": "MaxConcurrentRuns"}
    assert properties("AdvanceFunction")["ReservedConcurrentExecutions"] == {
        "Ref": "MaxConcurrentRuns"}
    assert float(env["ReconcilerFunction"]["AGENT_RUNTIME_RESUME_GRACE_SECONDS"]) > 0


def test_an_execution_is_one_slice_and_one_state_transition() -> None:
    """Advance ends the execution whatever it answers (no Choice, no Succeed): a slice
    that finishes, suspends or continues in the next execution makes one state
    transition; only a throttle passes through a second state, a Wait."""
    definition = json.loads(DEFINITION.read_text())
    states = definition["States"]
    assert definition["StartAt"] == "Advance"
    assert set(states) == {"Advance", "AdvanceThrottled"}
    assert states["Advance"]["End"] is True and "Next" not in states["Advance"]
    assert [catch["Next"] for catch in states["Advance"]["Catch"]] == ["AdvanceThrottled"]
    wait = states["AdvanceThrottled"]
    assert wait["Type"] == "Wait" and wait["Seconds"] > 0 and wait["Next"] == "Advance"
    # Advance gets the execution's input whole (a slice number included or not,
    # no path is missing) and the execution's ARN.
    assert states["Advance"]["Parameters"]["Payload"] == {
        "input.$": "$$.Execution.Input", "execution_arn.$": "$$.Execution.Id"}


def test_advance_may_start_the_state_machine_s_executions_and_nothing_else() -> None:
    """Its grant comes from a policy attached from outside its role (the role cannot
    name the state machine, which names Advance's alias, without a cycle)."""
    template = load_template()
    policy = template["Resources"]["AdvanceStartsSlices"]
    assert policy["Type"] == "AWS::IAM::Policy"
    assert policy["Properties"]["Roles"] == [{"Ref": "AdvanceRole"}]
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [{
        "Effect": "Allow", "Action": "states:StartExecution",
        "Resource": {"Ref": "RunStateMachine"}}]
    variables = properties("AdvanceFunction")["Environment"]["Variables"]
    assert "AGENT_RUNTIME_STATE_MACHINE_ARN" not in variables
