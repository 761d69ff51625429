"""What a step costs on AWS: requests, capacity units and dollars per 1,000 steps.

Issue 32, acceptance 3. Under moto, template.yaml's stack with the real
handlers behind its functions (tests/functions/aws_stack.py) runs two agent
runs from `POST /runs` to their end, with the scripted echo model (no model
wait): (a) 10 sequential prompt steps, (b) a loop of 100 iterations of one
prompt step. Everything the handlers send to AWS is counted with botocore's
`before-parameter-build`/`after-call` hooks, by service and operation, and
priced with us-east-1 on-demand list prices (`PRICES` in bench/aws_billing.py, printed).

DynamoDB units are computed from item sizes, not read from the answers
(moto's ConsumedCapacity is a constant). The rules (`Meter`, AWS's published
ones; item size as `item_size` sums it):

* a write costs 1 write unit per started KB of the larger of the item before
  and after it; 2 per KB inside TransactWriteItems (a ConditionCheck there
  is billed as a transactional write of the item it checks); a refused
  conditional write is billed as if it wrote;
* each GSI whose entry a write adds, removes or changes costs 1 write unit
  per started KB of that entry (keys plus projected attributes plus 100
  bytes); a changed index key is a delete and a put;
* a read costs 1 read unit per started 4 KB, per item for GetItem and
  BatchGetItem, per request (items summed) for Query; half that when
  eventually consistent, twice that in TransactGetItems; at least one unit.

Lambda: every invocation is a request; its duration is estimated as the
handler's own CPU time, measured (the handler thread's CPU less what it spent
inside AWS calls, which here is moto's emulation; the garbage collector,
which would sweep moto's emulated account too, paused), plus an assumed round
trip per AWS request (`LATENCY_MS`), billed at the function's MemorySize from
the template. Step Functions: the state transitions of each execution of the
run (states entered, from their histories: an attempt runs as one execution
per slice, each making one transition, Advance), standard workflow. KMS: the
handlers call it directly never; S3 (bucket key) and DynamoDB (cached table key) call it
about once per key per few minutes, whatever the traffic, so it is listed
and priced, and it amounts to nothing per step.

    python bench/aws_cost.py
"""

from __future__ import annotations

import gc
import io
import math
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The functions' INFO logs are not the report (set before their logger exists).
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
for _path in (REPO / "tests" / "functions", REPO):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench.aws_billing import (  # noqa: E402 - found once REPO is on the path
    INDEX_ENTRY_OVERHEAD,
    KB,
    PRICES,
    Bill,
    Index,
    item_size,
    read_units,
    write_units,
)

ECHO = {"model": "scripted/echo"}
TARGET = 0.010  # dollars per 1,000 steps: what Lambda durable functions cost (issue 32)
# Round trips assumed per AWS request (in-region, from Lambda), for the duration estimate.
LATENCY_MS = {"dynamodb": 5.0, "s3": 20.0, "events": 15.0, "stepfunctions": 20.0}
DEFAULT_LATENCY_MS = 15.0
# The fake clock moves this much at every checkpoint (a transaction): steps a
# second apart, as with a model's answer (whose wait is not billed here). A
# lease renewed at each checkpoint then moves, as on a real clock.
SECONDS_PER_CHECKPOINT = 1.0
_TRANSACTIONAL_WRITE, _STANDARD_WRITE = 2, 1


class Meter:
    """Counts the requests of `clients` and prices DynamoDB's by item size.

    Item images before and after each DynamoDB write, and the full items a
    Query returned, are read with `probe`, a client of its own that nothing
    counts.
    """

    def __init__(self, clients: list[Any], probe: Any, bill: Bill) -> None:
        self._clients = clients
        self._probe = probe
        self.bill = bill
        self._lock = threading.Lock()
        self._tables: dict[str, tuple[tuple[str, ...], list[Index]]] = {}
        self._aws_cpu = threading.local()

    @contextmanager
    def counting(self, tables: tuple[str, ...] = ()) -> Iterator[Meter]:
        """Count while inside; `tables`' schemas are read first (read later, inside a
        handler, the probe's DescribeTable would look like the handler's own call)."""
        for table in tables:
            self._schema(table)
        for client in self._clients:
            client.meta.events.register("before-parameter-build", self._before)
            client.meta.events.register("after-call", self._after)
        try:
            yield self
        finally:
            for client in self._clients:
                client.meta.events.unregister("before-parameter-build", self._before)
                client.meta.events.unregister("after-call", self._after)

    def aws_cpu(self) -> float:
        """CPU seconds this thread has spent inside counted AWS calls."""
        return float(getattr(self._aws_cpu, "seconds", 0.0))

    # -- hooks -------------------------------------------------------------------

    def _before(self, params: dict[str, Any], model: Any, context: dict[str, Any],
                **_: Any) -> None:
        service = model.service_model.service_name
        context["cost_meter"] = {"params": params, "started": time.thread_time(),
                                 "before": self._images(service, model.name, params)}

    def _after(self, parsed: dict[str, Any], model: Any, context: dict[str, Any],
               **_: Any) -> None:
        state = context.get("cost_meter")
        if state is None:
            return
        service, operation = model.service_model.service_name, model.name
        with self._lock:
            self.bill.requests[f"{service}:{operation}"] += 1
            if service == "events" and operation == "PutEvents":
                self.bill.event_entries += len(state["params"].get("Entries", []))
            if service == "dynamodb":
                self._price_dynamodb(operation, state["params"], state["before"], parsed)
        self._aws_cpu.seconds = self.aws_cpu() + time.thread_time() - state["started"]

    # -- DynamoDB ------------------------------------------------------------------

    def _schema(self, table: str) -> tuple[tuple[str, ...], list[Index]]:
        if table not in self._tables:
            described = self._probe.describe_table(TableName=table)["Table"]
            keys = tuple(part["AttributeName"] for part in described["KeySchema"])
            indexes = [Index(index["IndexName"],
                             tuple(part["AttributeName"] for part in index["KeySchema"]),
                             index["Projection"]["ProjectionType"],
                             tuple(index["Projection"].get("NonKeyAttributes", ())))
                       for index in described.get("GlobalSecondaryIndexes", [])]
            self._tables[table] = (keys, indexes)
        return self._tables[table]

    def _get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self._probe.get_item(
            TableName=table, Key=key, ConsistentRead=True).get("Item")
        return item

    def _key(self, table: str, item: dict[str, Any]) -> dict[str, Any]:
        return {name: item[name] for name in self._schema(table)[0]}

    def _writes(self, operation: str, params: dict[str, Any],
                ) -> list[tuple[str, dict[str, Any], int]]:
        """(table, key, units per KB) of each item a write request writes."""
        if operation == "PutItem":
            table = params["TableName"]
            return [(table, self._key(table, params["Item"]), _STANDARD_WRITE)]
        if operation in ("UpdateItem", "DeleteItem"):
            return [(params["TableName"], params["Key"], _STANDARD_WRITE)]
        if operation == "TransactWriteItems":
            found = []
            for entry in params["TransactItems"]:
                (_, request), = entry.items()
                table = request["TableName"]
                found.append((table, request.get("Key") or self._key(table, request["Item"]),
                              _TRANSACTIONAL_WRITE))
            return found
        if operation == "BatchWriteItem":
            return [(table, self._key(table, request["PutRequest"]["Item"])
                     if "PutRequest" in request else request["DeleteRequest"]["Key"],
                     _STANDARD_WRITE)
                    for table, requests in params["RequestItems"].items() for request in requests]
        return []

    def _images(self, service: str, operation: str,
                params: dict[str, Any]) -> list[dict[str, Any] | None]:
        if service != "dynamodb":
            return []
        return [self._get(table, key) for table, key, _ in self._writes(operation, params)]

    def _price_dynamodb(self, operation: str, params: dict[str, Any],
                        before: list[dict[str, Any] | None], parsed: dict[str, Any]) -> None:
        bill = self.bill
        for (table, key, per_kb), old in zip(self._writes(operation, params), before,
                                              strict=True):
            new = self._get(table, key)
            size = max(item_size(old), item_size(new))
            bill.write_units += per_kb * write_units(size)
            kind = key.get("sk", {}).get("S", "?").split("#", 1)[0]
            bill.written_bytes[kind] += size
            bill.writes[kind] += 1
            bill.index_write_units += self._index_writes(table, old, new)
        if operation == "GetItem":
            item = self._get(params["TableName"], params["Key"])
            bill.read_units += read_units(item_size(item),
                                          consistent=bool(params.get("ConsistentRead")))
        elif operation == "BatchGetItem":
            for table, request in params["RequestItems"].items():
                for key in request["Keys"]:
                    bill.read_units += read_units(item_size(self._get(table, key)),
                                                  consistent=bool(request.get("ConsistentRead")))
        elif operation in ("Query", "Scan"):
            table = params["TableName"]
            if params.get("IndexName"):  # KEYS_ONLY entries: what came back is the entry
                size = sum(item_size(item) for item in parsed.get("Items", []))
            else:  # billed on whole items, whatever the projection returned
                size = sum(item_size(self._get(table, self._key(table, item)))
                           for item in parsed.get("Items", []))
            bill.read_units += read_units(size, consistent=bool(params.get("ConsistentRead")))
        elif operation == "TransactGetItems":
            for entry in params["TransactItems"]:
                request = entry["Get"]
                bill.read_units += 2 * read_units(
                    item_size(self._get(request["TableName"], request["Key"])), consistent=True)

    def _index_writes(self, table: str, old: dict[str, Any] | None,
                      new: dict[str, Any] | None) -> int:
        keys, indexes = self._schema(table)
        units = 0
        for index in indexes:
            before, after = index.entry(old, keys), index.entry(new, keys)
            if before == after:
                continue
            moved = before is not None and after is not None and any(
                before[name] != after[name] for name in index.keys)
            for entry in ((before, after) if moved else (after or before,)):
                if entry is not None:
                    units += write_units(item_size(entry) + INDEX_ENTRY_OVERHEAD)
        return units


# -- Lambda and Step Functions -------------------------------------------------------

def timed_handlers(lambdas: Any, meter: Meter, memory_mb: dict[str, int]) -> None:
    """Wrap each deployed handler so its invocation is billed: a request, and the
    duration estimate (own CPU plus the assumed round trips of its AWS requests)."""
    for name, handler in list(lambdas.handlers.items()):
        lambdas.handlers[name] = _timed(name, handler, meter, memory_mb[name])


def _timed(name: str, handler: Callable[[Any, Any], Any], meter: Meter,
           memory_mb: int) -> Callable[[Any, Any], Any]:
    def run(event: Any, context: Any) -> Any:
        bill = meter.bill
        with meter._lock:
            requests_before = Counter(bill.requests)
        cpu, aws = time.thread_time(), meter.aws_cpu()
        try:
            return handler(event, context)
        finally:
            own = (time.thread_time() - cpu) - (meter.aws_cpu() - aws)
            with meter._lock:
                made = bill.requests - requests_before
                waited = sum(count * LATENCY_MS.get(op.split(":")[0], DEFAULT_LATENCY_MS)
                             for op, count in made.items()) / 1000
                bill.invocations[name] += 1
                bill.own_cpu_seconds[name] += own
                # Lambda bills whole milliseconds of the function's configured memory.
                billed = math.ceil((own + waited) * 1000) / 1000
                bill.gb_seconds += billed * memory_mb / 1024
    return run


def transitions(stepfunctions: Any, execution_arn: str) -> int:
    """The state transitions an execution made: the states it entered."""
    history = stepfunctions.get_paginator("get_execution_history").paginate(
        executionArn=execution_arn)
    return sum(1 for page in history for event in page["events"]
               if event["type"].endswith("StateEntered"))


# -- the runs ------------------------------------------------------------------------

def prompts(count: int) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "ten-prompts", "steps": [
        {"id": f"ask-{n}", "type": "prompt", "prompt": f"step {n}: summarise what came before"}
        for n in range(1, count + 1)]}


def loop(iterations: int) -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "hundred-iterations", "steps": [
        {"id": "spin", "type": "loop", "loop": {"maxIterations": iterations},
         "steps": [{"id": "ask", "type": "prompt",
                    "prompt": "iteration {{ loop.iteration }}"}]}]}


def memory_of_functions() -> dict[str, int]:
    from aws_stack import _functions

    from tests.stores.aws.aws_template import load_template

    return {name: int(props["MemorySize"])
            for name, props in _functions(load_template()).items()}


def measure(deployment: Any, manifest: dict[str, Any], steps: int) -> Bill:
    """Run `manifest` on the deployed stack from `POST /runs` to its end; what it cost.

    The HTTP API function creates it, the start function (given the
    resume-requested event the rule delivers) starts its execution, and the
    state machine's Advance runs it, one execution per slice (the first
    reserving the attempt).
    """
    import json

    import boto3
    from advance_slices import wait_for_chain
    from aws_stack import http_event

    from tests.stores.aws.aws_template import REGION

    stack, services = deployment.stack, deployment.services
    clients = [services.store.client, services.stepfunctions, services.events]
    if services.store.blobs is not None:
        clients.append(services.store.blobs.client)
    bill = Bill(steps=steps)
    meter = Meter(clients, boto3.client("dynamodb", region_name=REGION), bill)
    handlers = dict(stack.lambdas.handlers)
    timed_handlers(stack.lambdas, meter, memory_of_functions())

    def tick(**_: Any) -> None:
        deployment.clock.advance(SECONDS_PER_CHECKPOINT)

    services.store.client.meta.events.register("before-call.dynamodb.TransactWriteItems", tick)
    # This process holds moto's whole emulated account: a full garbage collection
    # of it (100-300 ms of CPU) would be billed to whichever handler it lands in,
    # as if that handler's own work. A Lambda container holds none of it, so
    # collections wait while the run is measured.
    gc.collect()
    gc.disable()
    try:
        with meter.counting((services.store.table_name,)):
            answer = stack.call_api(http_event("api-start-run.json", body={
                "manifest": json.dumps(manifest), "options": ECHO}))
            bill.api_requests += 1
            if answer.status != 201:
                raise RuntimeError(f"POST /runs answered {answer.status}: {answer.body}")
            run_id = str(answer.body["run"]["runId"])
            stack.deliver_resume_requests()
            chain = wait_for_chain(stack, run_id, 1, timeout=600)
    finally:
        gc.enable()
        stack.lambdas.handlers.update(handlers)
        services.store.client.meta.events.unregister(
            "before-call.dynamodb.TransactWriteItems", tick)
    for ended in chain:
        if ended["status"] != "SUCCEEDED":
            raise RuntimeError(f"execution {ended['name']} of run {run_id} ended "
                               f"{ended['status']}")
    run = services.store.load_run(run_id)
    if run is None or run.status.value != "completed":
        raise RuntimeError(f"run {run_id} did not complete: {run}")
    bill.transitions = sum(transitions(stack.stepfunctions, ended["executionArn"])
                           for ended in chain)
    return bill


@contextmanager
def deployed_stack() -> Iterator[Any]:
    """template.yaml deployed in moto, as tests/functions/conftest.py deploys it."""
    import pytest
    from aws_stack import MOTO_CONFIG
    from conftest import deployed

    with pytest.MonkeyPatch.context() as patch:
        yield from deployed(patch, MOTO_CONFIG, executing=True)


# -- the report ------------------------------------------------------------------------

def report(runs: dict[str, Bill]) -> str:
    names = list(runs)
    width = 34
    lines = ["Prices (us-east-1, on-demand list):"]
    lines += [f"  {text:<56} ${value:.10f}".rstrip("0") for value, text in PRICES.values()]
    lines.append("  Lambda duration assumed: own CPU (measured) + round trips "
                 + ", ".join(f"{service} {ms:g} ms" for service, ms in LATENCY_MS.items())
                 + f", other {DEFAULT_LATENCY_MS:g} ms; at each function's MemorySize")
    lines.append("")
    header = f"{'':<{width}}" + "".join(f"{name:>22}" for name in names)
    lines += [header, f"{'steps':<{width}}" + "".join(f"{runs[n].steps:>22}" for n in names)]
    operations = sorted({op for bill in runs.values() for op in bill.requests})
    lines.append("requests per step")
    for op in operations:
        lines.append(f"  {op:<{width - 2}}" + "".join(
            f"{runs[n].requests[op] / runs[n].steps:>22.2f}" for n in names))

    def row(label: str, value: Callable[[Bill], float], fmt: str = ".2f") -> None:
        lines.append(f"{label:<{width}}" + "".join(
            f"{format(value(runs[n]), fmt):>22}" for n in names))

    lines.append("units per step")
    row("  DynamoDB write units (table)", lambda b: b.write_units / b.steps)
    row("  DynamoDB write units (indexes)", lambda b: b.index_write_units / b.steps)
    row("  DynamoDB read units", lambda b: b.read_units / b.steps)
    row("  KB written per step (max old/new)", lambda b: sum(b.written_bytes.values())
        / b.steps / KB)
    for kind in sorted({kind for bill in runs.values() for kind in bill.writes}):
        row(f"  KB per {kind} item write", lambda b, kind=kind: b.written_bytes[kind]
            / max(1, b.writes[kind]) / KB)
    row("  Lambda invocations", lambda b: sum(b.invocations.values()) / b.steps, ".3f")
    row("  Lambda GB-seconds", lambda b: b.gb_seconds / b.steps, ".5f")
    row("  Lambda own CPU ms", lambda b: sum(b.own_cpu_seconds.values()) / b.steps * 1000)
    row("  Step Functions transitions", lambda b: b.transitions / b.steps, ".3f")
    lines.append("dollars per 1,000 steps")
    for part in next(iter(runs.values())).dollars():
        row(f"  {part}", lambda b, part=part: b.dollars()[part] / b.steps * 1000, ".5f")
    row("total", Bill.per_thousand_steps, ".5f")
    lines.append(f"{'target':<{width}}" + "".join(f"{TARGET:>22.5f}" for _ in names))
    lines.append(f"{'meets it':<{width}}" + "".join(
        f"{'yes' if runs[n].per_thousand_steps() <= TARGET else 'no':>22}" for n in names))
    return "\n".join(lines)


def main() -> None:
    runs = {}
    for name, manifest, steps in (("10-step prompt run", prompts(10), 10),
                                  ("100-iteration loop", loop(100), 100)):
        # The functions' JSON logs and metric lines are not the report.
        with deployed_stack() as deployment, redirect_stdout(io.StringIO()):
            runs[name] = measure(deployment, manifest, steps)
    print(report(runs))


if __name__ == "__main__":
    main()
