"""S3 blobs: content-addressed bytes under the project's customer-managed KMS key.

`S3BlobStore` keeps the bytes a DynamoDB item cannot hold (checkpoint bodies
and run texts over the store's inline limit); `S3ArtifactStore` keeps run
artifacts. Both are the same seam as `stores.artifacts.LocalArtifactStore`:
`put(data, media_type=...) -> (uri, sha256)`, `get(uri) -> bytes` and
`run_of(uri)`, the run a blob belongs to.

* Keyed under their run: `<prefix><run>/<sha256>` (`run_segment(run_id)`), so a
  retried put of the same bytes names the same object, and deleting a run
  (`delete_run`) deletes exactly its blobs: two runs with the same bytes hold
  two objects, and neither's deletion touches the other's. Blobs written
  before this layout (`<prefix><sha256[:2]>/<sha256>`, shared across runs) stay
  readable; retention does not find them (docs/retention.md says how to drop
  them).
* `IfNoneMatch="*"`: a put never overwrites an object; an existing one (412,
  or 409 when two puts race) already holds these bytes.
* Every put names SSE-KMS with the given key and a bucket key, whatever the
  bucket's default, and sends its SHA-256 so S3 rejects bytes damaged in flight.
* Every read checks the bytes against the sha256 in the key (`CorruptRecord`
  on a mismatch, never the bytes). A missing object is `CorruptRecord` too: a
  store only asks for blobs its records name. Without s3:ListBucket, S3
  answers a missing object 403, not 404: that reads as missing as well.
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from botocore.exceptions import ClientError

from stores import aws_clients
from stores.artifacts import run_segment
from stores.base import CorruptRecord, StoreError, StoreUnavailable

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

# S3 answers a put refused by IfNoneMatch with 412, and with 409 when another
# put of the same key is in flight: either way the object is (being) written
# with the same bytes, since the key is their hash.
_ALREADY_STORED = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
_MISSING = frozenset({"NoSuchKey", "404", "NotFound", "AccessDenied", "403"})
# DeleteObjects takes at most this many keys a request.
_DELETE_BATCH = 1000


class S3BlobStore:
    """Content-addressed blobs in `bucket` under `prefix`, encrypted with `kms_key_id`."""

    def __init__(self, bucket: str, kms_key_id: str, *, prefix: str = "checkpoints/",
                 client: S3Client | None = None) -> None:
        if not bucket:
            raise ValueError("S3BlobStore needs a bucket")
        if not kms_key_id:
            raise ValueError("S3BlobStore needs the KMS key that encrypts its objects")
        self.bucket = bucket
        self.kms_key_id = kms_key_id
        self.prefix = prefix
        self.client: S3Client = client if client is not None else aws_clients.client("s3")

    def run_prefix(self, run_id: str) -> str:
        """Where the blobs of `run_id` live: the prefix `delete_run` clears."""
        return f"{self.prefix}{run_segment(run_id)}/"

    def key_of(self, sha256: str, run_id: str) -> str:
        return f"{self.run_prefix(run_id)}{sha256}"

    def uri_of(self, sha256: str, run_id: str) -> str:
        return f"s3://{self.bucket}/{self.key_of(sha256, run_id)}"

    def put(self, data: bytes, *, media_type: str = "application/octet-stream",
            run_id: str) -> tuple[str, str]:
        """Store `data` once for `run_id`; return (uri, sha256). Re-putting the same
        bytes for the same run is a no-op."""
        digest = hashlib.sha256(data)
        sha256 = digest.hexdigest()
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self.key_of(sha256, run_id), Body=data,
                ContentType=media_type,
                IfNoneMatch="*", ServerSideEncryption="aws:kms", SSEKMSKeyId=self.kms_key_id,
                BucketKeyEnabled=True,
                ChecksumSHA256=base64.b64encode(digest.digest()).decode("ascii"))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in _ALREADY_STORED:
                self._check_bucket(error, "PutObject")
                raise
        return self.uri_of(sha256, run_id), sha256

    def get(self, uri: str) -> bytes:
        """The bytes at `uri`, checked against the sha256 their key names."""
        bucket, key = _parse(uri)
        # Any prefix of this bucket: records keep the uri they were written
        # with, and the prefix may have been configured differently since.
        if bucket != self.bucket:
            raise ValueError(f"{uri!r} is not in this blob store's bucket")
        sha256 = key.rsplit("/", 1)[-1]
        try:
            data = self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in _MISSING:
                raise CorruptRecord(f"blob {uri} is missing from its bucket") from error
            self._check_bucket(error, "GetObject")
            raise
        if hashlib.sha256(data).hexdigest() != sha256:
            raise CorruptRecord(f"blob {uri} does not match its sha256")
        return data

    def run_of(self, uri: str) -> str | None:
        """The run whose blob `uri` names, or None for one of the shared layout
        (`<prefix><sha256[:2]>/<sha256>`). ValueError for a uri outside this bucket."""
        bucket, key = _parse(uri)
        if bucket != self.bucket:
            raise ValueError(f"{uri!r} is not in this blob store's bucket")
        parts = key.rsplit("/", 2)
        if len(parts) < 2 or not parts[-1]:
            raise ValueError(f"{uri!r} names no blob of this store")
        segment, sha256 = parts[-2], parts[-1]
        # A run id of two hex digits equal to the hash's first two reads as the
        # shared layout: refused to a tenant's run rather than given to another.
        if segment == sha256[:2]:
            return None
        return unquote(segment)

    def delete_run(self, run_id: str) -> int:
        """Delete every object under the run's prefix; return how many. Repeatable."""
        deleted = 0
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.run_prefix(run_id))
        for page in pages:
            keys = [entry["Key"] for entry in page.get("Contents", []) if "Key" in entry]
            for start in range(0, len(keys), _DELETE_BATCH):
                batch = keys[start:start + _DELETE_BATCH]
                answer = self.client.delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": name} for name in batch], "Quiet": True})
                errors = answer.get("Errors", [])
                if errors:
                    first = errors[0]
                    raise StoreError(f"S3 refused to delete {len(errors)} blob(s) of run "
                                     f"{run_id!r}, e.g. {first.get('Key')}: "
                                     f"{first.get('Code')} {first.get('Message')}")
                deleted += len(batch)
        return deleted

    def _check_bucket(self, error: ClientError, what: str) -> None:
        """Raise `StoreUnavailable` naming the bucket and its region when `error`
        says it does not exist."""
        code = error.response.get("Error", {}).get("Code")
        if code != "NoSuchBucket":
            return
        raise StoreUnavailable(
            f"S3 bucket {self.bucket!r} in {self.client.meta.region_name} does not exist, or "
            f"is not visible to these credentials ({what}: {code}); deploy it "
            "(template.yaml) or fix the store location's bucket") from error


class S3ArtifactStore(S3BlobStore):
    """Run artifacts (tool outputs, files) as content-addressed S3 objects.

    The same guarantees as `S3BlobStore`, under the `artifacts/` prefix by
    default; `media_type` is kept as the object's Content-Type.
    """

    def __init__(self, bucket: str, kms_key_id: str, *, prefix: str = "artifacts/",
                 client: S3Client | None = None) -> None:
        super().__init__(bucket, kms_key_id, prefix=prefix, client=client)


def _parse(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
        raise ValueError(f"not an s3 uri: {uri!r}")
    return parsed.netloc, parsed.path.lstrip("/")
