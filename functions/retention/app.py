"""Retention on AWS: a run's every item and blob goes when its TTL removes the run.

DynamoDB's TTL removes only a finished run's META item. This function consumes
the table's stream (template.yaml: `RetentionFunction`, whose event source
mapping filters to these records) and, for each TTL removal of a META item,
deletes what the run still owns: its checkpoints, effects, approvals and
definition (`DynamoDbRunStore.delete_run` of the now missing run), its
checkpoint blobs and its artifacts (both keyed under the run in S3, so
another run's blobs, even with the same bytes, are never touched).

A TTL removal is a REMOVE whose `userIdentity` is the DynamoDB service
(`principalId` dynamodb.amazonaws.com); a REMOVE by anyone else (a
`delete_run`, which clears everything itself) is ignored. A run whose id
has been created again since is left alone: its `create_run` cleared the
old run's items. Deletion is repeatable, so a record that fails is reported
back (`batchItemFailures`) and retried, and a redelivered record finishes a
deletion cut short. Logs name run ids and counts only.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from agent_runtime.startup_heap import freeze_startup_heap
from functions.telemetry import count, logger
from stores.dynamodb.items import META, run_id_of
from stores.dynamodb.location import open_dynamodb_store
from stores.dynamodb.s3 import S3ArtifactStore
from stores.dynamodb.store import DynamoDbRunStore

STORE = "AGENT_RUNTIME_STORE"
TTL_PRINCIPAL = "dynamodb.amazonaws.com"
PARTITION_PREFIX = "RUN#"


@dataclass(frozen=True)
class Retention:
    """The store and the run's artifact store, built once per container."""

    store: DynamoDbRunStore
    artifacts: S3ArtifactStore | None

    @classmethod
    def from_environment(cls) -> Retention:
        location = os.environ.get(STORE)
        if not location:
            raise ValueError(f"environment variable {STORE} is not set")
        store = open_dynamodb_store(location)
        blobs = store.blobs
        artifacts = None if blobs is None else S3ArtifactStore(
            blobs.bucket, blobs.kms_key_id, client=blobs.client)
        return cls(store=store, artifacts=artifacts)

    def expire(self, run_id: str) -> bool:
        """Delete what the expired run left; False when a new run has taken its id."""
        if self.store.load_run(run_id) is not None:
            return False
        self.store.delete_run(run_id)  # items, then its checkpoint blobs
        if self.artifacts is not None:
            self.artifacts.delete_run(run_id)
        return True


@functools.cache
def retention() -> Retention:
    """This container's store (tests replace this function)."""
    return Retention.from_environment()


def expired_run(record: Mapping[str, Any]) -> str | None:
    """The run a stream record's TTL removal expired, or None for any other record."""
    if record.get("eventName") != "REMOVE":
        return None
    identity = record.get("userIdentity") or {}
    if identity.get("type") != "Service" or identity.get("principalId") != TTL_PRINCIPAL:
        return None
    keys = (record.get("dynamodb") or {}).get("Keys") or {}
    pk, sk = (keys.get("pk") or {}).get("S"), (keys.get("sk") or {}).get("S")
    if sk != META or not isinstance(pk, str) or not pk.startswith(PARTITION_PREFIX):
        return None
    return run_id_of(pk) or None


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    failures: list[dict[str, str]] = []
    expired = 0
    for record in event.get("Records", []):
        run_id = expired_run(record)
        if run_id is None:
            continue
        try:
            if retention().expire(run_id):
                expired += 1
                logger.info("expired run deleted", extra={"run_id": run_id})
            else:
                logger.info("run id in use again; nothing to delete", extra={"run_id": run_id})
        except Exception as error:  # reported back below, so the record is retried
            logger.warning("expired run not deleted yet", extra={
                "run_id": run_id, "error": type(error).__name__})
            sequence = (record.get("dynamodb") or {}).get("SequenceNumber")
            if sequence:
                failures.append({"itemIdentifier": sequence})
            else:
                raise
    count("RetentionRunsDeleted", expired)
    return {"batchItemFailures": failures}


# Imported: what this container built while starting lives as long as it does.
freeze_startup_heap()
