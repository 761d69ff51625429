"""What AWS bills for, as bench/aws_cost.py counts it: us-east-1 on-demand list
prices (`PRICES`), DynamoDB's sizing rules for items, index entries and
capacity units (its published ones), and a run's `Bill` in dollars.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

KB, READ_BLOCK, INDEX_ENTRY_OVERHEAD = 1024, 4096, 100

# us-east-1 on-demand list prices, in dollars.
PRICES: dict[str, tuple[float, str]] = {
    "dynamodb_write_unit": (0.625 / 1e6, "DynamoDB on-demand, per write request unit"),
    "dynamodb_read_unit": (0.125 / 1e6, "DynamoDB on-demand, per read request unit"),
    "s3_put": (0.005 / 1000, "S3 Standard PUT, COPY, POST, LIST, per request"),
    "s3_get": (0.0004 / 1000, "S3 Standard GET and all other requests, per request"),
    "lambda_request": (0.20 / 1e6, "Lambda, per request"),
    "lambda_gb_second": (0.0000133334, "Lambda arm64, per GB-second"),
    "sfn_transition": (0.025 / 1000, "Step Functions standard, per state transition"),
    "events_entry": (1.00 / 1e6, "EventBridge, per custom event published"),
    "api_request": (1.00 / 1e6, "API Gateway HTTP API, per request"),
    "kms_request": (0.03 / 10_000, "KMS, per request"),
}
_S3_PUT_CLASS = frozenset({"PutObject", "CopyObject", "ListObjectsV2", "DeleteObjects",
                           "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"})


# -- DynamoDB item sizes and units -------------------------------------------------

def value_size(value: dict[str, Any]) -> int:
    """The bytes DynamoDB counts for one attribute value (its published sizing rules)."""
    (kind, inner), = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        digits = inner.lstrip("-").replace(".", "").strip("0") or "0"
        return math.ceil(len(digits) / 2) + 1
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(value_size({kind[0]: element}) for element in inner)
    if kind == "L":
        return 3 + sum(1 + value_size(element) for element in inner)
    if kind == "M":
        return 3 + sum(1 + len(name.encode()) + value_size(element)
                       for name, element in inner.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: dict[str, Any] | None) -> int:
    """An item's size as DynamoDB bills it: attribute names plus values."""
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def write_units(size: int) -> int:
    return max(1, math.ceil(size / KB))


def read_units(size: int, *, consistent: bool) -> float:
    units = max(1, math.ceil(size / READ_BLOCK))
    return float(units) if consistent else units / 2


@dataclass(frozen=True)
class Index:
    """A GSI: its key attributes and what it projects."""

    name: str
    keys: tuple[str, ...]
    projection: str
    included: tuple[str, ...] = ()

    def entry(self, item: dict[str, Any] | None, table_keys: tuple[str, ...],
              ) -> dict[str, Any] | None:
        """The index entry `item` has (None: the index is sparse and it has none)."""
        if item is None or any(name not in item for name in self.keys):
            return None
        if self.projection == "ALL":
            return dict(item)
        kept = {*table_keys, *self.keys, *self.included}
        return {name: value for name, value in item.items() if name in kept}


@dataclass
class Bill:
    """What one run made: requests by "service:Operation", units, Lambda and Step Functions."""

    steps: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    write_units: float = 0.0       # table writes (transactions doubled)
    index_write_units: float = 0.0
    read_units: float = 0.0
    written_bytes: Counter[str] = field(default_factory=Counter)  # by item kind (sk prefix)
    writes: Counter[str] = field(default_factory=Counter)  # items written, by kind
    event_entries: int = 0
    api_requests: int = 0
    invocations: Counter[str] = field(default_factory=Counter)
    gb_seconds: float = 0.0
    own_cpu_seconds: Counter[str] = field(default_factory=Counter)
    transitions: int = 0

    def dollars(self) -> dict[str, float]:
        price = {name: value for name, (value, _) in PRICES.items()}
        s3_puts = sum(count for name, count in self.requests.items()
                      if name.startswith("s3:") and name[3:] in _S3_PUT_CLASS)
        s3_others = sum(count for name, count in self.requests.items()
                        if name.startswith("s3:")) - s3_puts
        return {
            "DynamoDB writes": (self.write_units + self.index_write_units)
            * price["dynamodb_write_unit"],
            "DynamoDB reads": self.read_units * price["dynamodb_read_unit"],
            "S3": s3_puts * price["s3_put"] + s3_others * price["s3_get"],
            "Lambda requests": sum(self.invocations.values()) * price["lambda_request"],
            "Lambda duration": self.gb_seconds * price["lambda_gb_second"],
            "Step Functions": self.transitions * price["sfn_transition"],
            "EventBridge": self.event_entries * price["events_entry"],
            "API Gateway": self.api_requests * price["api_request"],
            "KMS": sum(count for name, count in self.requests.items()
                       if name.startswith("kms:")) * price["kms_request"],
        }

    def per_thousand_steps(self) -> float:
        return sum(self.dollars().values()) / self.steps * 1000
