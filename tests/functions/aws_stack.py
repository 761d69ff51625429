"""template.yaml deployed in moto, with our real handlers behind its Lambda functions.

    stack = deploy(session, lambdas)                 # inside mock_aws(config=MOTO_CONFIG)
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()                  # the rule's target: the start function
    stack.wait_for(execution_name(run_id, 1))
    answer = stack.call_api(http_event("api-get-run.json", runId=run_id))  # the HTTP API

What is built from the template's own properties, so the tests and the
deployment cannot drift apart:

* the table, bucket and key (tests/stores/aws/aws_template.py);
* every `AWS::Serverless::Function`, named after its logical id, with its
  handler, runtime, architecture, timeout and memory (Globals applied); the
  handler string is what the fake Lambda imports and calls;
* the state machine: statemachine/run.asl.json with the template's
  `DefinitionSubstitutions` resolved to the moto functions' aliases (each
  function's `AutoPublishAlias`, over a published version);
* the functions' environment (Globals and each function's variables,
  resolved), which the handlers read from os.environ;
* the HTTP API's function, called with API Gateway's events (events/api-*.json,
  `http_event`) through Lambda's API, as API Gateway calls it;
* the stack's event bus, the resume-requested rule on it (event pattern,
  retry policy, dead-letter queue) and the start function's on-failure
  destination (`create_resume_route`; with another `Names.stack` it builds a
  second stack's in the same account). moto's EventBridge cannot invoke a
  Lambda target, so the rule targets an SQS queue here and
  `deliver_resume_requests` hands what it received to the start function, as
  the rule's Lambda target would.

moto's Step Functions (`execute_state_machine`) runs executions in worker
threads and calls Lambda through boto3; `Lambdas.moto_invoke` replaces moto's
docker-less Lambda so an invoke runs the handler in-process with a fake
context (`get_remaining_time_in_millis` as the test sets it). A handler that
raises answers as Lambda does (`FunctionError: Unhandled`, `errorType`); a
`LambdaCrash` (BaseException: the function's process died) answers
`Runtime.ExitError`, which the state machine does not retry.

Throttling as Lambda does it: a function given a reserved concurrency
(`Lambdas.reserved`) answers an invocation beyond it with
`TooManyRequestsException` (HTTP 429), which the state machine sees as
`Lambda.TooManyRequestsException`; `Lambdas.throttle_next` throttles the next
invocations of a function regardless. `Lambdas.throttled` counts both.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import boto3
from moto.core.exceptions import JsonRESTError

from agent_runtime.testing import FakeClock
from functions import environment
from functions.executions import execution_arn
from functions.resume_requests import ResumeRequested, request_resume
from tests.stores.aws.aws_template import (
    ACCOUNT,
    REGION,
    AwsResources,
    Names,
    clients,
    create_resources,
    load_template,
    properties,
)

REPO = Path(__file__).resolve().parents[2]
EVENTS = REPO / "events"
DEFINITION = REPO / "statemachine" / "run.asl.json"
MOTO_CONFIG: Any = {"stepfunctions": {"execute_state_machine": True},
                    "lambda": {"use_docker": False}}
FUNCTION = "AWS::Serverless::Function"


class Throttled(Exception):
    """Lambda refused the invocation: the function is at its reserved concurrency."""


class TooManyRequests(JsonRESTError):
    """Lambda's answer to a throttled invocation."""

    code = 429

    def __init__(self, message: str) -> None:
        super().__init__("TooManyRequestsException", message)


class LambdaCrash(BaseException):
    """The function's process died mid-invocation (killed, out of memory)."""


def sample_event(name: str, **detail: Any) -> dict[str, Any]:
    """An event of events/, its detail (EventBridge events) or its fields updated."""
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    if "detail" in event:
        event["detail"].update(detail)
    else:
        event.update(detail)
    return event


_UNCHANGED: Any = object()


def iam_caller(user_arn: str) -> dict[str, Any]:
    """An HTTP API authorizer context of a SigV4-signed request by `user_arn`."""
    account = user_arn.split(":")[4]
    return {"iam": {"accessKey": "ASIAIOSFODNN7EXAMPLE", "accountId": account,
                    "callerId": "AROAEXAMPLEROLEID1234:session", "cognitoIdentity": None,
                    "principalOrgId": None, "userArn": user_arn,
                    "userId": "AROAEXAMPLEROLEID1234:session"}}


# The scopes template.yaml's routes need by default (ApiReadScope, ApiWriteScope).
FULL_SCOPE = "agent-runtime/runs.read agent-runtime/runs.write"


def jwt_caller(**claims: str) -> dict[str, Any]:
    """An HTTP API authorizer context of a request whose JWT the authorizer verified
    (granting both of the API's scopes unless `scope=` says otherwise)."""
    return {"jwt": {"claims": {"scope": FULL_SCOPE, **claims}, "scopes": None}}


def http_event(name: str, *, body: Any = _UNCHANGED, query: Mapping[str, str] | None = None,
               caller: dict[str, Any] | None = _UNCHANGED, **path: str) -> dict[str, Any]:
    """An HTTP API event of events/ (api-*.json) for other path parameters (`runId=`),
    body (JSON; None for none), query parameters or caller (None: no authorizer)."""
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    parameters = {**event.get("pathParameters", {}), **path}
    route = event["routeKey"].split(" ", 1)[1]
    raw_path = route.format_map(parameters)
    event["rawPath"] = event["requestContext"]["http"]["path"] = raw_path
    if parameters:
        event["pathParameters"] = parameters
    if body is not _UNCHANGED:
        event.pop("body", None)
        event["headers"].pop("content-length", None)
        if body is not None:
            event["body"] = json.dumps(body)
            event["headers"]["content-length"] = str(len(event["body"].encode()))
    if query is not None:
        event["rawQueryString"] = urlencode(query)
        event["queryStringParameters"] = dict(query)
    if caller is not _UNCHANGED:
        if caller is None:
            event["requestContext"].pop("authorizer", None)
        else:
            event["requestContext"]["authorizer"] = caller
    return event


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    headers: dict[str, str]
    body: Any


@dataclass
class FakeContext:
    function_name: str
    remaining_ms: int
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class Invocation:
    function: str
    event: Any
    result: Any = None
    error: str | None = None


class Lambdas:
    """The deployed functions' handlers, and what the tests control about them."""

    def __init__(self) -> None:
        self.handlers: dict[str, Callable[[Any, Any], Any]] = {}
        self.remaining_ms: dict[str, int] = {}
        self.invocations: list[Invocation] = []
        # A function whose gate is set waits at it before its handler runs.
        self.gates: dict[str, threading.Event] = {}
        # How long (real seconds) a gate holds at most: a test that forgets to
        # open one still ends.
        self.gate_seconds = 60.0
        # Errors to answer after a function's handler ran (its response lost),
        # as Lambda's service errors (`Lambda.ServiceException`) answer.
        self.faults: dict[str, list[str]] = {}
        self.waiting = threading.Semaphore(0)
        # Reserved concurrency: invocations beyond it are throttled.
        self.reserved: dict[str, int] = {}
        self.throttle_next: dict[str, int] = {}
        self.throttled: dict[str, int] = {}
        self.running: dict[str, int] = {}
        self.most_running: dict[str, int] = {}
        self._lock = threading.Lock()

    def register(self, name: str, handler: str, timeout_s: int) -> None:
        module, _, function = handler.rpartition(".")
        self.handlers[name] = getattr(importlib.import_module(module), function)
        self.remaining_ms[name] = timeout_s * 1000

    def calls(self, function: str) -> list[Invocation]:
        with self._lock:
            return [call for call in self.invocations if call.function == function]

    def invoke(self, function: str, event: Any) -> tuple[Any, str | None]:
        """Run a handler as Lambda would: its result, or its error payload and kind.
        Raises `Throttled` when Lambda would refuse to run it."""
        with self._lock:
            running = self.running.get(function, 0)
            forced = self.throttle_next.get(function, 0)
            if forced or running >= self.reserved.get(function, running + 1):
                self.throttle_next[function] = max(0, forced - 1)
                self.throttled[function] = self.throttled.get(function, 0) + 1
                raise Throttled(function)
            self.running[function] = running + 1
            self.most_running[function] = max(self.most_running.get(function, 0), running + 1)
        try:
            return self._run(function, event)
        finally:
            with self._lock:
                self.running[function] -= 1

    def _run(self, function: str, event: Any) -> tuple[Any, str | None]:
        gate = self.gates.get(function)
        if gate is not None:
            self.waiting.release()
            gate.wait(timeout=self.gate_seconds)
        call = Invocation(function, event)
        with self._lock:
            self.invocations.append(call)
        context = FakeContext(function, self.remaining_ms[function])
        try:
            call.result = self.handlers[function](event, context)
        except LambdaCrash as crash:
            call.error = "Runtime.ExitError"
            return {"errorType": call.error, "errorMessage": str(crash)}, "Unhandled"
        except Exception as error:
            call.error = type(error).__name__
            return {"errorType": call.error, "errorMessage": str(error)}, "Unhandled"
        faults = self.faults.get(function)
        if faults:
            call.error = faults.pop(0)
            return {"errorType": call.error, "errorMessage": "the response was lost"}, "Unhandled"
        return call.result, None

    def moto_invoke(self, name: str, body: Any, response_headers: dict[str, str]) -> bytes:
        """What moto's LambdaSimpleBackend.invoke answers: our handler's result."""
        event = json.loads(body) if body else {}
        try:
            payload, error = self.invoke(name, event)
        except Throttled as throttled:
            raise TooManyRequests(f"Rate exceeded: {throttled} is at its reserved "
                                  "concurrency") from None
        if error is not None:
            response_headers["x-amz-function-error"] = error
        return json.dumps(payload).encode()


@dataclass(frozen=True)
class ResumeRoute:
    """A stack's bus and what its resume-requested rule delivers to: `queue_url`
    stands in for the start function; the rule's dead letters and the start
    function's failures go to their queues."""

    bus: str
    bus_arn: str
    queue_url: str
    dead_letter_queue_url: str
    start_failed_queue_url: str


@dataclass
class Stack:
    """The deployed stack: resource names, clients, and how to drive it."""

    resources: AwsResources
    names: Names
    state_machine_arn: str
    environment: dict[str, str]
    stepfunctions: Any
    lambda_client: Any
    events: Any
    sqs: Any
    route: ResumeRoute
    lambdas: Lambdas

    @property
    def queue_url(self) -> str:
        return self.route.queue_url

    def invoke(self, function: str, event: Any) -> Any:
        """Invoke a deployed function through Lambda's API; its decoded answer."""
        answer = self.lambda_client.invoke(FunctionName=function,
                                           Payload=json.dumps(event).encode())
        body = json.loads(answer["Payload"].read())
        if answer.get("FunctionError"):
            raise AssertionError(f"{function} failed: {body}")
        return body

    def call_api(self, event: dict[str, Any]) -> HttpAnswer:
        """An HTTP API request handed to the API function as API Gateway does; its answer."""
        answer = self.invoke("ApiFunction", event)
        text = answer.get("body") or ""
        return HttpAnswer(answer["statusCode"], answer.get("headers") or {},
                          json.loads(text) if text else None)

    def put_resume_request(self, run_id: str, *, attempt: int, reason: str) -> None:
        request_resume(self.events, ResumeRequested(run_id=run_id, attempt=attempt,
                                                    reason=reason),
                       bus=self.environment["AGENT_RUNTIME_EVENT_BUS"])

    def deliver_resume_requests(self) -> list[Any]:
        """What the rule matched, handed to the start function: its answers."""
        answers = []
        while True:
            received = self.sqs.receive_message(QueueUrl=self.queue_url,
                                                MaxNumberOfMessages=10, WaitTimeSeconds=0)
            messages = received.get("Messages", [])
            if not messages:
                return answers
            for message in messages:
                answers.append(self.invoke("StartFunction", json.loads(message["Body"])))
                self.sqs.delete_message(QueueUrl=self.queue_url,
                                        ReceiptHandle=message["ReceiptHandle"])

    def execution_arn(self, name: str) -> str:
        return execution_arn(self.state_machine_arn, name)

    def wait_for(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        """The execution `name` once it has ended."""
        arn = self.execution_arn(name)
        deadline = time.monotonic() + timeout
        while True:
            described: dict[str, Any] = self.stepfunctions.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING":
                return described
            if time.monotonic() > deadline:
                raise AssertionError(f"execution {name} still running after {timeout} s")
            time.sleep(0.05)

    def executions(self) -> dict[str, str]:
        """Every execution of the state machine: name -> status."""
        listed = self.stepfunctions.list_executions(stateMachineArn=self.state_machine_arn)
        return {item["name"]: item["status"] for item in listed["executions"]}

    def wait_until_idle(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while "RUNNING" in self.executions().values():
            if time.monotonic() > deadline:
                raise AssertionError(f"executions still running: {self.executions()}")
            time.sleep(0.05)


def _functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each function's properties with the template's Globals applied."""
    defaults = template.get("Globals", {}).get("Function", {})
    found = {}
    for name, resource in template["Resources"].items():
        if resource["Type"] != FUNCTION:
            continue
        props = {**defaults, **resource["Properties"]}
        variables = {**defaults.get("Environment", {}).get("Variables", {}),
                     **resource["Properties"].get("Environment", {}).get("Variables", {})}
        props["Environment"] = {"Variables": variables}
        found[name] = props
    return found


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("functions/__init__.py", "")
    return buffer.getvalue()


def _queue(sqs: Any, names: Names, template: dict[str, Any], logical_id: str,
           name: str) -> str:
    """The template's queue `logical_id`, named `name`: its URL, with its refs recorded."""
    props = names.resolve(properties(template, logical_id), template)
    attributes = {key: str(value).lower() if isinstance(value, bool) else str(value)
                  for key, value in props.items()}
    url: str = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    names.refs[logical_id] = url
    names.attributes[(logical_id, "Arn")] = arn
    names.attributes[(logical_id, "QueueName")] = name
    return url


def create_resume_route(session: boto3.session.Session, names: Names) -> ResumeRoute:
    """The template's EventBus, its resume-requested rule (targeting a queue that
    stands in for the start function) and both dead-letter queues, named after
    `names.stack`; their refs are recorded in `names`."""
    template = load_template()
    events = session.client("events", region_name=REGION)
    sqs = session.client("sqs", region_name=REGION)
    bus = names.resolve(properties(template, "EventBus")["Name"], template)
    bus_arn = events.create_event_bus(Name=bus)["EventBusArn"]
    names.refs["EventBus"] = bus
    names.attributes[("EventBus", "Arn")] = bus_arn
    dead_letters = _queue(sqs, names, template, "ResumeRequestedDeadLetterQueue",
                          f"{bus}-resume-dead-letters")
    start_failed = _queue(sqs, names, template, "StartFailedQueue", f"{bus}-start-failed")
    queue_url = sqs.create_queue(QueueName=f"{bus}-start")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    start = properties(template, "StartFunction")["Events"]["ResumeRequested"]["Properties"]
    rule = names.resolve(start, template)
    events.put_rule(Name=f"{bus}-resume-requested", EventBusName=rule["EventBusName"],
                    EventPattern=json.dumps(rule["Pattern"]))
    events.put_targets(Rule=f"{bus}-resume-requested", EventBusName=rule["EventBusName"],
                       Targets=[{"Id": "start", "Arn": queue_arn,
                                 "RetryPolicy": rule["RetryPolicy"],
                                 "DeadLetterConfig": rule["DeadLetterConfig"]}])
    return ResumeRoute(bus=bus, bus_arn=bus_arn, queue_url=queue_url,
                       dead_letter_queue_url=dead_letters, start_failed_queue_url=start_failed)


def deploy(session: boto3.session.Session, lambdas: Lambdas, *,
           parameters: dict[str, Any] | None = None) -> Stack:
    """template.yaml's run store, functions, state machine and rule, in moto."""
    template = load_template()
    suffix = uuid.uuid4().hex[:10]
    resources = create_resources(clients(session), table=f"runs-{suffix}",
                                 bucket=f"blobs-{suffix}")
    defaults = {name: spec.get("Default") for name, spec in template["Parameters"].items()}
    names = Names(refs={"RunsTable": resources.table, "BlobBucket": resources.bucket,
                        "DataKey": resources.key_id},
                  attributes={("DataKey", "Arn"): resources.key_arn,
                              ("BlobBucket", "Arn"): f"arn:aws:s3:::{resources.bucket}",
                              ("RunsTable", "Arn"): f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:"
                                                    f"table/{resources.table}"},
                  parameters={**defaults, **(parameters or {})})

    iam = session.client("iam", region_name=REGION)
    role = iam.create_role(RoleName=f"agent-runtime-{suffix}", AssumeRolePolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"},
            "Action": "sts:AssumeRole"}]}))["Role"]["Arn"]
    lambda_client = session.client("lambda", region_name=REGION)
    functions = _functions(template)
    for name, props in functions.items():
        timeout = int(names.resolve(props["Timeout"], template))  # a number or a parameter
        created = lambda_client.create_function(
            FunctionName=name, Runtime=props["Runtime"], Handler=props["Handler"], Role=role,
            Code={"ZipFile": _zip()}, Timeout=timeout, MemorySize=props["MemorySize"],
            Architectures=props["Architectures"])
        names.refs[name] = name
        names.attributes[(name, "Arn")] = created["FunctionArn"]
        # SAM's AutoPublishAlias: a published version behind the alias, which
        # `!Ref Function.Alias` names (the state machine invokes it).
        version = lambda_client.publish_version(FunctionName=name)["Version"]
        alias = lambda_client.create_alias(FunctionName=name, Name=props["AutoPublishAlias"],
                                           FunctionVersion=version)
        names.refs[f"{name}.Alias"] = alias["AliasArn"]
        lambdas.register(name, props["Handler"], timeout)

    machine = template["Resources"]["RunStateMachine"]["Properties"]
    definition = DEFINITION.read_text()
    for key, value in names.resolve(machine["DefinitionSubstitutions"], template).items():
        definition = definition.replace("${" + key + "}", value)
    stepfunctions = session.client("stepfunctions", region_name=REGION)
    machine_name = f"run-{suffix}"
    state_machine_arn = stepfunctions.create_state_machine(
        name=machine_name, definition=definition, type=machine["Type"],
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/states-{suffix}")["stateMachineArn"]
    names.refs["RunStateMachine"] = state_machine_arn
    names.attributes[("RunStateMachine", "Name")] = machine_name

    route = create_resume_route(session, names)
    invoke_config = names.resolve(functions["StartFunction"]["EventInvokeConfig"], template)
    lambda_client.put_function_event_invoke_config(
        FunctionName="StartFunction",
        MaximumRetryAttempts=invoke_config["MaximumRetryAttempts"],
        MaximumEventAgeInSeconds=invoke_config["MaximumEventAgeInSeconds"],
        DestinationConfig={"OnFailure": {
            "Destination": invoke_config["DestinationConfig"]["OnFailure"]["Destination"]}})

    variables: dict[str, str] = {}
    for props in functions.values():
        for key, value in names.resolve(props["Environment"]["Variables"], template).items():
            variables[key] = str(value)

    return Stack(resources=resources, names=names, state_machine_arn=state_machine_arn,
                 environment=variables, stepfunctions=stepfunctions,
                 lambda_client=lambda_client, events=session.client("events", region_name=REGION),
                 sqs=session.client("sqs", region_name=REGION), route=route, lambdas=lambdas)


@dataclass
class Deployment:
    """What a test drives: the stack, the functions' handlers, the clock they read
    (conftest's `deployment` fixture), and the services the handlers use."""

    stack: Stack
    lambdas: Lambdas
    clock: FakeClock
    services: environment.Services

    def configure(self, config_file: Path | None = None, **settings: Any) -> None:
        """Change the functions' settings (e.g. the runtime config, AGENT_RUNTIME_CONFIG)."""
        if config_file is not None:
            settings["config_file"] = str(config_file)
        self.services.settings = dataclasses.replace(self.services.settings, **settings)
        self.services._config = None
