"""template.yaml's alarms (docs/design.md section 10), read from the template itself: what
each watches, that none fires on one datapoint without a reason given beside it,
and that the reconciler's alarms watch metrics the reconciler really publishes.

The rollback alarms of the gradual deployments: test_template_deploys.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_stack import Deployment, FakeContext, sample_event
from test_finished_elsewhere import ECHO, MANIFESTS, RunningOut
from test_template import resources

from agent_runtime.reconcile import Action
from functions.reconciler import app as reconciler
from tests.stores.aws.aws_template import TEMPLATE, load_template

FUNCTIONS = ("AdvanceFunction", "StartFunction", "ReconcilerFunction", "ApiFunction",
             "RetentionFunction")
CODE_RUNNERS = ("CodeRunnerPythonFunction", "CodeRunnerJavaScriptFunction")
ALARM_ACTIONS = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}],
                            {"Ref": "AWS::NoValue"}]}
QUEUE_DEPTH = ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
STACK_METRIC = {"service": {"Ref": "AWS::StackName"}}
# name -> (namespace, metric, dimensions, threshold)
ALARMS: dict[str, tuple[str, str, dict[str, Any], int]] = {
    "RunExecutionsFailedAlarm": ("AWS/States", "ExecutionsFailed",
                                 {"StateMachineArn": {"Ref": "RunStateMachine"}}, 0),
    **{f"{name.removesuffix('Function')}ErrorsAlarm": (
        "AWS/Lambda", "Errors", {"FunctionName": {"Ref": name}}, 0) for name in FUNCTIONS},
    **{f"{name.removesuffix('Function')}ThrottlesAlarm": (
        "AWS/Lambda", "Throttles", {"FunctionName": {"Ref": name}}, 0)
       for name in FUNCTIONS if name != "RetentionFunction"},
    # An hour behind a stream that keeps records 24 hours (milliseconds).
    "RetentionIteratorAgeAlarm": ("AWS/Lambda", "IteratorAge",
                                  {"FunctionName": {"Ref": "RetentionFunction"}}, 3_600_000),
    **{alarm: (*QUEUE_DEPTH, {"QueueName": {"Fn::GetAtt": [queue, "QueueName"]}}, 0)
       for alarm, queue in (("ResumeRequestedDeadLettersAlarm", "ResumeRequestedDeadLetterQueue"),
                            ("StartFailuresAlarm", "StartFailedQueue"),
                            ("RetentionFailuresAlarm", "RetentionFailedQueue"))},
    "RunsSuspendedByReconcilerAlarm": ("AgentRuntime",
                                       reconciler._METRICS[Action.SUSPENDED_RUN],
                                       STACK_METRIC, 0),
    "ReconcilePassCutShortAlarm": ("AgentRuntime", "ReconcilePassCutShort", STACK_METRIC, 0),
}
# Alarms that fire on one datapoint, each with its reason in a comment beside it.
SINGLE_DATAPOINT = {"RunsSuspendedByReconcilerAlarm"}


def properties(name: str) -> dict[str, Any]:
    props: dict[str, Any] = load_template()["Resources"][name]["Properties"]
    return props


def _dimensions(alarm: dict[str, Any]) -> dict[str, Any]:
    return {entry["Name"]: entry["Value"] for entry in alarm["Dimensions"]}


def _rollback_alarms() -> set[str]:
    return {name for name in resources("AWS::CloudWatch::Alarm")
            if name.endswith("NewVersionErrorsAlarm")}


@pytest.mark.parametrize("name", sorted(ALARMS))
def test_each_alarm_watches_its_metric_and_notifies_the_topic(name: str) -> None:
    namespace, metric, dimensions, threshold = ALARMS[name]
    alarm = properties(name)
    assert (alarm["Namespace"], alarm["MetricName"]) == (namespace, metric)
    assert _dimensions(alarm) == dimensions
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Threshold"] == threshold
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == ALARM_ACTIONS


def test_the_alarms_are_these_and_the_topic_is_optional() -> None:
    assert set(resources("AWS::CloudWatch::Alarm")) == {*ALARMS, *_rollback_alarms()}
    # One per function: the code runners' too (their errors and throttles are
    # Advance's to see: a code step that failed or was refused).
    assert len(_rollback_alarms()) == len(FUNCTIONS) + len(CODE_RUNNERS)
    template = load_template()
    assert template["Parameters"]["AlarmTopicArn"]["Default"] == ""
    assert template["Conditions"]["HasAlarmTopic"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]}


@pytest.mark.parametrize("name", sorted(resources("AWS::CloudWatch::Alarm")))
def test_no_alarm_fires_on_one_datapoint_unless_its_comment_says_why(name: str) -> None:
    alarm = properties(name)
    evaluated, needed = alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]
    assert needed <= evaluated
    if name in SINGLE_DATAPOINT:
        assert (evaluated, needed) == (1, 1)
        # The comment just above the resource gives the reason.
        text = TEMPLATE.read_text()
        above = text[:text.index(f"\n  {name}:\n")].rsplit("\n\n", 1)[-1]
        assert "One datapoint:" in above, name
    else:
        # M of N: a lone breaching period (a retried error, a run taken over)
        # does not fire; a lasting one does.
        assert needed >= 2 and evaluated > needed, (name, needed, evaluated)


def test_the_retention_function_and_its_stream_are_watched() -> None:
    stream = properties("RetentionFunction")["Events"]["TtlRemovals"]["Properties"]
    # The queue whose depth alarms is where the stream's failures go.
    assert stream["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": ["RetentionFailedQueue", "Arn"]}
    age = properties("RetentionIteratorAgeAlarm")
    assert age["Statistic"] == "Maximum"
    # Fires (period x datapoints) well before DynamoDB Streams' 24 hours drop records.
    fires_after_ms = age["Threshold"] + age["Period"] * age["DatapointsToAlarm"] * 1000
    assert fires_after_ms < 24 * 3600 * 1000 / 4


def test_the_reconciler_alarms_watch_what_the_functions_publish() -> None:
    """functions/telemetry.py publishes in POWERTOOLS_METRICS_NAMESPACE with the
    dimension service = POWERTOOLS_SERVICE_NAME (the stack's name)."""
    variables = load_template()["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["POWERTOOLS_SERVICE_NAME"] == {"Ref": "AWS::StackName"}
    for name in ("RunsSuspendedByReconcilerAlarm", "ReconcilePassCutShortAlarm"):
        alarm = properties(name)
        assert alarm["Namespace"] == variables["POWERTOOLS_METRICS_NAMESPACE"], name
        assert _dimensions(alarm) == {"service": variables["POWERTOOLS_SERVICE_NAME"]}, name


def _published(printed: str) -> dict[str, tuple[str, list[list[str]], Any]]:
    """The EMF metrics in `printed`: name -> (namespace, dimension sets, value).

    Each is one JSON object written at once, but the executions a pass starts
    print from moto's threads meanwhile, so a line may hold another's output
    too: objects are decoded where they start, not line by line."""
    found = {}
    decoder = json.JSONDecoder()
    for start in (match.start() for match in re.finditer(r'\{"_aws":', printed)):
        record, _ = decoder.raw_decode(printed, start)
        for directive in record["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                found[metric["Name"]] = (directive["Namespace"], directive["Dimensions"],
                                         record[metric["Name"]])
    return found


def test_a_pass_cut_short_publishes_the_metric_its_alarm_watches(
        deployment: Deployment, capfd: pytest.CaptureFixture[str]) -> None:
    runtime = deployment.services.runtime()
    for _ in range(2):
        runtime.create_run(manifest=MANIFESTS / "hello.agent.yaml", options=ECHO)
    deployment.clock.advance(deployment.services.settings.queued_seconds + 1)
    margin_ms = reconciler.PASS_MARGIN_SECONDS * 1000
    capfd.readouterr()

    # Time for one run, then less than the margin: the pass stops early.
    context: Any = RunningOut("ReconcilerFunction", 50_000,
                              left_ms=[margin_ms + 1, margin_ms - 1])
    assert reconciler.handler(sample_event("scheduled-reconcile.json"), context)["cut_short"]
    alarm = properties("ReconcilePassCutShortAlarm")
    namespace, dimensions, value = _published(capfd.readouterr().out)[alarm["MetricName"]]
    assert namespace == deployment.stack.environment["POWERTOOLS_METRICS_NAMESPACE"]
    assert dimensions == [list(_dimensions(alarm))]
    assert sum(value if isinstance(value, list) else [value]) == 1

    # A pass with time publishes no such metric.
    reconciler.handler(sample_event("scheduled-reconcile.json"),
                       FakeContext("ReconcilerFunction", 50_000))
    assert alarm["MetricName"] not in _published(capfd.readouterr().out)
    deployment.stack.wait_until_idle()
