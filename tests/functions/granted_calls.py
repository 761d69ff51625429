"""Every AWS call a handler makes is one its role is granted (template.yaml).

moto does not enforce IAM, so the function tests would pass whatever the
roles say. `CallRecorder` sees each botocore call made while a handler of the
template (its `Handler`) is on the stack, or on the stack of the thread that
submitted the work to a `ThreadPoolExecutor` (the store's listing reads its
partitions on a pool), and `ungranted` says which of them
the role does not allow: the IAM action (a transaction is authorised per item,
`DeleteObjects` per object, `ListObjectsV2` as `s3:ListBucket`), the index a
Query reads, the S3 prefix of a key, the detail-type of an event.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import botocore.client
from grants import Grant, as_list, functions, grants, role_of

from agent_runtime.worker_threads import Job, WorkerThreads
from tests.stores.aws.aws_template import load_template

SERVICE_PREFIX = {"stepfunctions": "states", "bedrock-runtime": "bedrock"}
TRANSACT_ITEM_ACTION = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                        "ConditionCheck": "ConditionCheckItem"}
OPERATION_ACTION = {"ListObjectsV2": "ListBucket", "DeleteObjects": "DeleteObject",
                    "Converse": "InvokeModel", "ConverseStream": "InvokeModelWithResponseStream",
                    "Invoke": "InvokeFunction"}


@dataclass(frozen=True)
class Call:
    function: str
    service: str
    operation: str
    params: dict[str, Any]


def handler_frames(template: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(file suffix, function name) of each template function's handler -> its name."""
    found = {}
    for name in functions(template):
        module, _, entry = template["Resources"][name]["Properties"]["Handler"].rpartition(".")
        found[(module.replace(".", "/") + ".py", entry)] = name
    return found


class CallRecorder:
    def __init__(self) -> None:
        self.template = load_template()
        self._handlers = handler_frames(self.template)
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        # The handler whose work a pool thread is doing: its own stack does not
        # hold the handler's frame, the submitting thread's did.
        self._submitted_by = threading.local()

    def _handler(self) -> str | None:
        frame = sys._getframe(2)
        while frame is not None:
            code = frame.f_code
            for (suffix, entry), name in self._handlers.items():
                if code.co_name == entry and code.co_filename.endswith(suffix):
                    return name
            frame = frame.f_back
        function: str | None = getattr(self._submitted_by, "function", None)
        return function

    @contextmanager
    def recording(self) -> Iterator[None]:
        original: Callable[..., Any] = botocore.client.BaseClient._make_api_call
        recorder = self

        def make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            function = recorder._handler()
            if function is not None:
                with recorder._lock:
                    recorder.calls.append(Call(function, client.meta.service_model.service_name,
                                               operation, dict(params)))
            return original(client, operation, params)

        original_submit = ThreadPoolExecutor.submit

        def submit(pool: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any,
                   **kwargs: Any) -> Future[Any]:
            function = recorder._handler()
            if function is None:
                return original_submit(pool, fn, *args, **kwargs)

            def on_behalf(*args: Any, **kwargs: Any) -> Any:
                recorder._submitted_by.function = function
                try:
                    return fn(*args, **kwargs)
                finally:
                    recorder._submitted_by.function = None
            return original_submit(pool, on_behalf, *args, **kwargs)

        # The engine's store calls go to its own worker pool (agent_runtime/worker_threads.py).
        original_job = WorkerThreads.submit

        def submit_job(pool: WorkerThreads, job: Job) -> None:
            function = recorder._handler()
            if function is None:
                return original_job(pool, job)
            return original_job(pool, functools.partial(on_behalf_of, function, job))

        def on_behalf_of(function: str, job: Callable[[], object]) -> Callable[[], object] | None:
            recorder._submitted_by.function = function
            try:
                then = job()
            finally:
                recorder._submitted_by.function = None
            # What the job leaves to do (settling, the next job) is the handler's too.
            return None if then is None else functools.partial(on_behalf_of, function, then)

        botocore.client.BaseClient._make_api_call = make_api_call  # type: ignore[method-assign]
        ThreadPoolExecutor.submit = submit  # type: ignore[method-assign]
        WorkerThreads.submit = submit_job  # type: ignore[method-assign]
        try:
            yield
        finally:
            botocore.client.BaseClient._make_api_call = original  # type: ignore[method-assign]
            ThreadPoolExecutor.submit = original_submit  # type: ignore[method-assign]
            WorkerThreads.submit = original_job  # type: ignore[method-assign]

    def ungranted(self) -> list[str]:
        refusals = []
        for call in self.calls:
            role = grants(role_of(call.function, self.template), self.template)
            refusals += [f"{call.function} {call.service}:{call.operation}: {why}"
                         for why in refused(call, role)]
        return sorted(set(refusals))


def refused(call: Call, role: list[Grant]) -> list[str]:
    """Why the role would refuse the call (empty: granted)."""
    prefix = SERVICE_PREFIX.get(call.service, call.service)
    if call.operation == "TransactWriteItems":
        actions = [f"dynamodb:{TRANSACT_ITEM_ACTION[kind]}"
                   for item in call.params["TransactItems"] for kind in item]
    else:
        actions = [f"{prefix}:{OPERATION_ACTION.get(call.operation, call.operation)}"]
    why = []
    for action in actions:
        holding = [grant for grant in role if action in grant.actions]
        if not holding:
            why.append(f"{action} is not granted")
        elif not any(_covers(grant, call) for grant in holding):
            why.append(f"{action} is granted, but not on what it touches: {_target(call)}")
    return why


def _target(call: Call) -> Any:
    params = call.params
    if call.operation == "PutEvents":
        return sorted({(entry.get("Source"), entry.get("DetailType"))
                       for entry in params.get("Entries", [])})
    if call.operation == "DeleteObjects":
        return sorted({entry["Key"] for entry in params["Delete"]["Objects"]})
    return params.get("IndexName") or params.get("Key") or params.get("Prefix")


def _covers(grant: Grant, call: Call) -> bool:
    params = call.params
    if call.service == "lambda" and call.operation == "Invoke":
        # Granted on a function's alias (`!Ref Function.Alias`): invoked by the alias's ARN.
        return any(isinstance(resource, dict) and str(params["FunctionName"]).endswith(
                   ":function:" + str(resource.get("Ref", "")).replace(".Alias", ":live"))
                   for resource in grant.resources)
    if call.service == "dynamodb" and call.operation == "Query":
        index = params.get("IndexName")
        wanted = ({"Fn::GetAtt": ["RunsTable", "Arn"]} if index is None
                  else {"Fn::Sub": f"${{RunsTable.Arn}}/index/{index}"})
        return wanted in grant.resources
    leading = grant.condition.get("ForAllValues:StringEquals", {}).get("dynamodb:LeadingKeys")
    if call.service == "dynamodb" and leading is not None:
        # Only items whose partition key is listed (the capacity slots).
        return params.get("Key", {}).get("pk", {}).get("S") in as_list(leading)
    if call.service == "s3" and call.operation in ("GetObject", "PutObject", "DeleteObjects"):
        keys = ([entry["Key"] for entry in params["Delete"]["Objects"]]
                if call.operation == "DeleteObjects" else [params["Key"]])
        return all(_object_granted(grant, key) for key in keys)
    if call.service == "s3" and call.operation == "ListObjectsV2":
        prefixes = grant.condition.get("StringLike", {}).get("s3:prefix", [])
        return any(_matches(pattern, params.get("Prefix", "")) for pattern in as_list(prefixes))
    if call.operation == "PutEvents":
        condition = grant.condition.get("StringEquals", {})
        sources = as_list(condition.get("events:source", []))
        types = as_list(condition.get("events:detail-type", []))
        return all(entry.get("Source") in sources and entry.get("DetailType") in types
                   for entry in params.get("Entries", []))
    return True


def _object_granted(grant: Grant, key: str) -> bool:
    for resource in grant.resources:
        pattern = resource.get("Fn::Sub", "") if isinstance(resource, dict) else ""
        if pattern.startswith("${BlobBucket.Arn}/") and _matches(
                pattern.removeprefix("${BlobBucket.Arn}/"), key):
            return True
    return False


def _matches(pattern: str, value: str) -> bool:
    return value.startswith(pattern.removesuffix("*")) if pattern.endswith("*") \
        else value == pattern
