"""How DynamoDbRunStore lays a run out in its one table, and reads it back.

Every item of a run shares the partition key `pk = RUN#<run_id>`:

* `META`: the mutable record, written by every state change and checkpoint:
  `state` JSON plus, as attributes, what the write conditions, the status
  GSI and a checkpoint touch.
* `META#DEF`: the definition (manifest, variables, budget, parent, ...),
  written once by create_run.
* `CP#<seq:010d>`: a checkpoint body (a delta, `stores.deltas`), inline or
  in S3, written once.
* `EFFECT#<key>`: an effect record. `APPROVAL#<id>`: a recorded decision.

The definition has an item of its own because DynamoDB bills a write by the
size of the whole item it leaves: a checkpoint that moves four numbers on
`META` then costs one write unit, not one per KB of manifest. `META#DEF`
never changes, so the store caches it per incarnation.

`META` attributes: `incarnation` (a uuid per created run, so a run deleted and
created again under the same id is never mistaken for the old one), `rev` (a
random token replaced by every write: a read-modify-write is conditioned on
it, so nothing changed since the read), `status`, `attempt`, `checkpoint_seq`,
`consumed_tokens`, `updated_at` and `lease_expires_at` (integer microseconds
since the epoch), `status_shard` and `due_at` (the keys of the status GSI:
see `status_shard` and `due_at`) and, on terminal runs only, `expires_at`
(the TTL, epoch seconds).
A run with a tenant also has `tenant` and `run_id` on `META`, the keys of the
sparse `by-tenant` GSI: unchanged by later writes, so they cost that index
no write after the first, and gone with `META` when a TTL removes it.
`META#DEF` carries `run_id` and `parent_run_id`, the keys of the sparse
`by-parent` GSI, and, for a run of an agent (`records.agent_of`), `agent_key`
and `created_at` (microseconds), those of the sparse `by-agent` GSI; the
definition never changes, so neither do those indexes.

JSON texts (`state`, `definition`, effect and approval records, checkpoint
bodies) are strings up to the store's inline limit and otherwise an S3 blob
`{uri, sha256, size}` (`Texts`). Checkpoint items keep the body's `sha256` and
`size` beside it; a body that fails its checksum or does not decode is
`CorruptRecord`, never a default. So is an item that is not what its key says
(a checkpoint of another seq, an effect of another key or run), and a
checkpoint missing below the run's `checkpoint_seq`.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from stores.base import CorruptRecord, StoreError
from stores.records import (
    Checkpoint,
    RecordDecodeError,
    RunRecord,
    RunStatus,
    agent_of,
    decode_record,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    from stores.dynamodb.s3 import S3BlobStore

Item = dict[str, "AttributeValueTypeDef"]
R = TypeVar("R", bound=BaseModel)

META = "META"
# The attribute of a keyed run's definition item naming its run key's item.
KEY_REF = "run_key_pk"
DEFINITION_SK = "META#DEF"
CHECKPOINT_PREFIX = "CP#"
EFFECT_PREFIX = "EFFECT#"
APPROVAL_PREFIX = "APPROVAL#"
# The status GSI, keyed (status_shard, due_at). Its partitions are write-sharded:
# unsharded, every running run sat in one partition, each lease renewal a write
# to that one hot key (see `status_shard`).
STATUS_INDEX = "by-status-shard"
# How many partitions of the status index each status spreads over. Part of the
# stored layout: a change needs every META item rewritten with its new shard.
STATUS_SHARDS = 16
# The unsharded index of earlier releases, keyed (status, due_at). No code reads
# it; template.yaml keeps it one release (see the comment there).
FORMER_STATUS_INDEX = "by-status"
PARENT_INDEX = "by-parent"
TENANT_INDEX = "by-tenant"
# An agent's runs within a tenant, keyed (agent_key, run_id), with `created_at`
# beside the keys so a time range is filtered in the index (see `agent_key`).
AGENT_INDEX = "by-agent"
TTL_ATTRIBUTE = "expires_at"
# Inline texts longer than this are compressed when that makes them smaller
# (`Texts`): below it the item is within its first KB anyway.
COMPRESS_FROM = 512
_COMPRESSION_LEVEL = 6
# What a compressed inline text may inflate to: far past what a record holds (a
# checkpoint body's deltas, a manifest), far below what would hurt a Lambda.
MAX_UNPACKED = 64 * 1024 * 1024

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The due_at that earlier releases gave a suspended run without a resume request:
# after any time, before `ORDERED`.
NEVER_DUE = 2**63 - 1
# The due_at of a run with nothing due (suspended without a request, finished) is
# ORDERED + `order_key(run_id)`: after every time, so `due_at < T` never reads it,
# and in run_id order, so a listing reads such runs a page at a time. A DynamoDB
# number holds 38 digits: 10**37 plus a 15-byte key (below 256**15 < 1.4 * 10**36).
ORDERED = 10**37
_ORDER_BYTES = 15

# The fields of a run that never change after create_run: its definition.
# (Not the budget: a resume may replace its limit. Runs stored when it was part of
# the definition still read it from there until their record is next written.)
DEFINITION_FIELDS = {"run_id", "manifest_hash", "manifest", "variables", "parent", "run_key",
                     "tenant", "options", "created_at"}
# The fields kept as attributes of META rather than in its `state` JSON.
ATTRIBUTE_FIELDS = {"status", "attempt", "lease_expires_at", "checkpoint_seq", "consumed_tokens",
                    "updated_at", "takeovers"}


def partition(run_id: str) -> str:
    return f"RUN#{run_id}"


def run_id_of(pk: str) -> str:
    return pk.removeprefix("RUN#")


def key(run_id: str, sk: str) -> Item:
    return {"pk": {"S": partition(run_id)}, "sk": {"S": sk}}


def checkpoint_sk(seq: int) -> str:
    return f"{CHECKPOINT_PREFIX}{seq:010d}"


def s(value: str) -> AttributeValueTypeDef:
    return {"S": value}


def n(value: int) -> AttributeValueTypeDef:
    return {"N": str(value)}


def micros(at: datetime) -> int:
    """Microseconds since the epoch: sortable, exact, and a DynamoDB number."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (at - EPOCH) // timedelta(microseconds=1)


def moment(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def names(*attributes: str) -> dict[str, str]:
    """Expression attribute names for `attributes` (`#status` -> `status`).

    Every attribute an expression names goes through one: `status`, `state`,
    `size` and friends are DynamoDB reserved words, and aliasing all of them
    keeps that from ever mattering.
    """
    return {f"#{attribute}": attribute for attribute in attributes}


class Texts:
    """JSON texts as attribute values: inline up to `inline_limit` stored bytes, else an
    S3 blob.

    Inline, a text over `COMPRESS_FROM` bytes is stored zlib-compressed (`B`) when
    that is smaller, else as it is (`S`): DynamoDB bills a write by the started KB
    of the item, twice in a transaction, and JSON shrinks severalfold. Items an
    earlier release wrote (`S` up to 64 KB) read as before.
    """

    def __init__(self, blobs: S3BlobStore | None, inline_limit: int) -> None:
        self.blobs = blobs
        self.inline_limit = inline_limit

    def encode(self, text: str, data: bytes | None = None, *,
               run_id: str) -> AttributeValueTypeDef:
        """`text` inline, or as a reference to a blob of `run_id` (deleted with the run)."""
        data = text.encode() if data is None else data
        packed = zlib.compress(data, _COMPRESSION_LEVEL) if len(data) > COMPRESS_FROM else data
        if len(packed) < len(data) and len(packed) <= self.inline_limit:
            return {"B": packed}
        if len(data) <= self.inline_limit:
            return {"S": text}
        if self.blobs is None:
            raise StoreError(f"a {len(data)}-byte record is over the inline limit "
                             f"({self.inline_limit} bytes) and this store has no blob store")
        uri, sha256 = self.blobs.put(data, media_type="application/json", run_id=run_id)
        return {"M": {"uri": s(uri), "sha256": s(sha256), "size": n(len(data))}}

    def decode(self, value: AttributeValueTypeDef | None, what: str) -> str:
        if value is not None and "S" in value:
            return value["S"]
        if value is not None and "B" in value:
            return _unpacked(value["B"], what)
        if value is None or "M" not in value:
            raise CorruptRecord(f"{what} has no text")
        ref: dict[str, Any] = dict(value["M"])
        try:
            uri, sha256, size = ref["uri"]["S"], ref["sha256"]["S"], int(ref["size"]["N"])
        except (KeyError, TypeError, ValueError) as error:
            raise CorruptRecord(f"{what} has a malformed blob reference") from error
        if self.blobs is None:
            raise StoreError(f"{what} is in S3 ({uri}) and this store has no blob store")
        data = self.blobs.get(uri)
        if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
            raise CorruptRecord(f"{what}: blob {uri} does not match its reference")
        try:
            return data.decode()
        except UnicodeDecodeError as error:
            raise CorruptRecord(f"{what}: blob {uri} is not UTF-8") from error


def _unpacked(packed: Any, what: str) -> str:
    """A compressed inline text, bounded: a damaged item never inflates past what any
    item could hold uncompressed (`MAX_UNPACKED`)."""
    try:
        inflater = zlib.decompressobj()
        data = inflater.decompress(bytes(packed), MAX_UNPACKED + 1)
        if len(data) > MAX_UNPACKED or inflater.unconsumed_tail or not inflater.eof:
            raise CorruptRecord(f"{what} is damaged: its compressed text does not end "
                                f"within {MAX_UNPACKED} bytes")
        return data.decode()
    except (zlib.error, TypeError, UnicodeDecodeError) as error:
        raise CorruptRecord(f"{what} is damaged: its compressed text did not decode") from error


# -- runs ------------------------------------------------------------------------

def status_shard(status: RunStatus, run_id: str) -> str:
    """The status index partition of a run: `<status>#<shard:02d>`, e.g. `running#07`.

    The shard comes from the run id alone, through a hash stable across
    processes and releases (not Python's salted `hash`), so every write of a
    run with one status lands in one partition and a reader finds it by
    trying the `STATUS_SHARDS` partitions of that status (`status_shards`).
    """
    digest = hashlib.sha256(run_id.encode()).digest()
    return f"{status.value}#{int.from_bytes(digest[:8], 'big') % STATUS_SHARDS:02d}"


def status_shards(status: RunStatus) -> list[str]:
    """Every status index partition a run of `status` can be in."""
    return [f"{status.value}#{shard:02d}" for shard in range(STATUS_SHARDS)]


def due_at(run: RunRecord) -> int:
    """The status index's sort key: when the reconciler should look at the run.

    A running run's lease expiry; a created run's creation time; a suspended
    run's resume request. A run with nothing due (suspended without a request,
    finished) is past every time, in run_id order (`order_key`): the
    reconciler's `due_at < T` never reads it, whether 10 or 100,000 wait on a
    human, and a listing reads those runs in its own order, page by page.
    """
    if run.status is RunStatus.RUNNING:
        return 0 if run.lease_expires_at is None else micros(run.lease_expires_at)
    if run.status is RunStatus.CREATED:
        return micros(run.created_at)
    if run.status is RunStatus.SUSPENDED and run.resume_requested_at is not None:
        return micros(run.resume_requested_at)
    return order_key(run.run_id)


def lease_still_due(stored_due: int | None, run: RunRecord) -> bool:
    """Whether a running run's status index entry may keep `stored_due` when a
    checkpoint renews its lease to `run.lease_expires_at`, rather than move with it.

    Moving it deletes and puts the run's index entry: 2 write units, as much as
    the rest of a small checkpoint after its two items (bench/aws_cost.py). Kept,
    it is never later than the lease, so `due_at < T` still finds every run whose
    lease expired before T (the listing checks the lease on the run it reads),
    and at least half a lease ahead of the checkpoint: a run checkpointing every
    few seconds moves its entry once per half lease, not at every step, and the
    reconciler reads a run with a live lease only after it went quiet for more
    than half a lease.
    """
    if stored_due is None or run.status is not RunStatus.RUNNING or run.lease_expires_at is None:
        return False
    lease, now = micros(run.lease_expires_at), micros(run.updated_at)
    return now + (lease - now) // 2 <= stored_due <= lease


def order_key(run_id: str) -> int:
    """`ORDERED` plus the first bytes of `run_id` as a number: ordered as the ids are
    (UTF-8 orders as code points do; ids equal in those bytes share a key)."""
    head = run_id.encode("utf-8", "surrogatepass")[:_ORDER_BYTES]
    return ORDERED + int.from_bytes(head.ljust(_ORDER_BYTES, b"\0"), "big")


def meta_item(run: RunRecord, *, incarnation: str, rev: str, texts: Texts,
              retention: timedelta | None) -> Item:
    state = run.model_dump_json(exclude=DEFINITION_FIELDS | ATTRIBUTE_FIELDS)
    item: Item = {
        **key(run.run_id, META), "incarnation": s(incarnation), "rev": s(rev),
        "state": texts.encode(state, run_id=run.run_id), "status": s(run.status.value),
        "status_shard": s(status_shard(run.status, run.run_id)),
        "attempt": n(run.attempt),
        "checkpoint_seq": n(run.checkpoint_seq or 0), "consumed_tokens": n(run.consumed_tokens),
        "updated_at": n(micros(run.updated_at)), "due_at": n(due_at(run)),
        "takeovers": n(run.takeovers),
    }
    if run.lease_expires_at is not None:
        item["lease_expires_at"] = n(micros(run.lease_expires_at))
    if run.lease_owner is not None:
        # Also in `state`; here so an owner's writes can be conditioned on it.
        item["lease_owner"] = s(run.lease_owner)
    if run.tenant is not None:  # sparse: runs without a tenant stay out of the index
        item |= {"tenant": s(run.tenant), "run_id": s(run.run_id)}
    if run.status.terminal and retention is not None:
        item[TTL_ATTRIBUTE] = n(int((run.updated_at + retention).timestamp()))
    return item


def key_partition(run_key: str) -> str:
    """The partition of a run key's item (stores.dynamodb.run_keys): fixed length
    whatever the key."""
    return f"RUNKEY#{hashlib.sha256(run_key.encode()).hexdigest()}"


def agent_key(tenant: str | None, agent: str) -> str:
    """The `by-agent` index partition of a tenant's runs of an agent: a digest of the
    pair, so a tenant's search reads its own runs only (never another tenant's of
    the same agent name), and a key of fixed length whatever the names."""
    pair = json.dumps([tenant, agent], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(pair.encode()).hexdigest()


def definition_item(run: RunRecord, *, incarnation: str, texts: Texts) -> Item:
    item: Item = {**key(run.run_id, DEFINITION_SK), "incarnation": s(incarnation),
                  "run_id": s(run.run_id),
                  "definition": texts.encode(run.model_dump_json(include=DEFINITION_FIELDS),
                                                run_id=run.run_id)}
    if run.parent is not None:
        item["parent_run_id"] = s(run.parent.run_id)
    agent = agent_of(run.manifest)
    if agent is not None:  # sparse: a run of no agent stays out of the index
        item |= {"agent_key": s(agent_key(run.tenant, agent)),
                 "created_at": n(micros(run.created_at))}
    if run.run_key is not None:  # so a deletion finds the key to free with the run
        item[KEY_REF] = s(key_partition(run.run_key))
    return item


def decode_definition(item: Item, texts: Texts) -> dict[str, Any]:
    run_id = run_id_of(item.get("pk", {}).get("S", "?"))
    return _json_object(texts.decode(item.get("definition"), f"the definition of run {run_id!r}"),
                        f"the definition of run {run_id!r}")


def decode_run(item: Item, definition: dict[str, Any], texts: Texts) -> RunRecord:
    """The run from its META item and its (decoded) definition."""
    run_id = run_id_of(item.get("pk", {}).get("S", "?"))
    what = f"run {run_id!r}"
    state = _json_object(texts.decode(item.get("state"), what), what)
    try:
        lease = item.get("lease_expires_at")
        attributes = {
            "status": item["status"]["S"], "attempt": int(item["attempt"]["N"]),
            "checkpoint_seq": int(item["checkpoint_seq"]["N"]) or None,
            "consumed_tokens": int(item["consumed_tokens"]["N"]),
            "updated_at": moment(int(item["updated_at"]["N"])),
            "lease_expires_at": None if lease is None else moment(int(lease["N"])),
        }
        if "takeovers" in item:  # items written before it was an attribute keep it in `state`
            attributes["takeovers"] = int(item["takeovers"]["N"])
        run = RunRecord.model_validate({**definition, **state, **attributes})
    except (KeyError, TypeError, ValueError, OverflowError) as error:
        # ValueError covers pydantic's ValidationError.
        raise CorruptRecord(f"{what} did not decode: {error}") from error
    if run.run_id != run_id:
        raise CorruptRecord(f"{what} holds run {run.run_id!r}")
    return run


def text_of(item: Item, name: str) -> str:
    """A string attribute every item of its kind has; its absence is damage."""
    try:
        return item[name]["S"]
    except KeyError as error:
        raise CorruptRecord(f"item {item.get('sk', {}).get('S', '?')!r} lacks {name!r}") from error


def number_of(item: Item, name: str) -> int:
    try:
        return int(item[name]["N"])
    except (KeyError, ValueError) as error:
        raise CorruptRecord(f"item {item.get('sk', {}).get('S', '?')!r} has no number "
                            f"{name!r}") from error


# -- checkpoints -----------------------------------------------------------------

def checkpoint_item(checkpoint: Checkpoint, body: str, texts: Texts) -> Item:
    data = body.encode()
    return {**key(checkpoint.run_id, checkpoint_sk(checkpoint.seq)),
            "seq": n(checkpoint.seq), "attempt": n(checkpoint.attempt),
            "created_at": n(micros(checkpoint.created_at)), "size": n(len(data)),
            "sha256": s(hashlib.sha256(data).hexdigest()),
            "body": texts.encode(body, data, run_id=checkpoint.run_id)}


def checked_checkpoints(items: list[Item], run_id: str, last: int) -> None:
    """Checkpoint items of a run read by sort key: exactly seqs 1..`last`, each under
    its own key. A gap or a missing tail is `CorruptRecord`, never an older checkpoint."""
    for expected, item in enumerate(items, 1):
        if text_of(item, "pk") != partition(run_id) or text_of(item, "sk") != checkpoint_sk(
                expected) or number_of(item, "seq") != expected:
            if text_of(item, "sk") == checkpoint_sk(expected):
                raise CorruptRecord(f"checkpoint {expected} of run {run_id!r} holds checkpoint "
                                    f"{number_of(item, 'seq')}")
            raise CorruptRecord(f"checkpoint {expected} of run {run_id!r} is missing "
                                f"(the run's checkpoints go up to {last})")
    if len(items) != last:
        raise CorruptRecord(f"checkpoint {len(items) + 1} of run {run_id!r} is missing "
                            f"(the run's checkpoints go up to {last})")


def checkpoint_body(item: Item, texts: Texts, run_id: str) -> str:
    what = f"checkpoint {item.get('seq', {}).get('N', '?')} of run {run_id!r}"
    body = texts.decode(item.get("body"), what)
    if hashlib.sha256(body.encode()).hexdigest() != item.get("sha256", {}).get("S"):
        raise CorruptRecord(f"{what} failed its checksum")
    return body


# -- effects and approvals -------------------------------------------------------

def record_item(run_id: str, sk: str, record: str, texts: Texts, **attributes: str) -> Item:
    return {**key(run_id, sk), "record": texts.encode(record, run_id=run_id),
            **{name: s(value) for name, value in attributes.items()}}


def owned_record(model: type[R], item: Item, texts: Texts, what: str) -> R:
    """The effect or approval decision an item of `record_item` holds, which must name
    the run and key (`EFFECT#<key>`, `APPROVAL#<id>`) it is stored under."""
    try:
        record = decode_record(model, texts.decode(item.get("record"), what))
    except RecordDecodeError as error:
        raise CorruptRecord(f"{what} did not decode: {error}") from error
    prefix, field = _OWNED_KEYS[model.__name__]
    run_id = getattr(record, "run_id", None)
    holds = (partition(str(run_id)), f"{prefix}{getattr(record, field, None)}")
    if holds != (item.get("pk", {}).get("S"), item.get("sk", {}).get("S")):
        raise CorruptRecord(f"{what} holds {holds[1]!r} of run {run_id!r}")
    return record


# The sort key prefix of an owned record's item, and the field naming its key.
_OWNED_KEYS = {"EffectRecord": (EFFECT_PREFIX, "key"),
               "ApprovalDecision": (APPROVAL_PREFIX, "approval_id")}


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise CorruptRecord(f"{what} did not decode: {error}") from error
    if not isinstance(value, dict):
        raise CorruptRecord(f"{what} is not a JSON object")
    return value

