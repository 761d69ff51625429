"""The DynamoDB RunStore and its S3 blobs: the store (`store`), its item layout
(`items`), conditional-write requests (`requests`), run reads and fencing (`runs`),
the effect ledger (`effects`), listing (`listing`), deletion (`deletion`), slice
bookkeeping for Step Functions (`slices`), location strings (`location`) and the
S3 blob and artifact stores (`s3`).

The public names (`from stores.dynamodb import DynamoDbRunStore`) are loaded
on first use (PEP 562): a Lambda handler that needs only `slices` must not pay
for importing the store and boto3's DynamoDB resources."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stores.dynamodb.s3 import S3ArtifactStore, S3BlobStore
    from stores.dynamodb.store import DynamoDbRunStore

# Public name -> the module that defines it.
_PUBLIC = {"DynamoDbRunStore": "stores.dynamodb.store", "S3BlobStore": "stores.dynamodb.s3",
           "S3ArtifactStore": "stores.dynamodb.s3"}

__all__ = ["DynamoDbRunStore", "S3ArtifactStore", "S3BlobStore"]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'stores.dynamodb' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # found once; later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
