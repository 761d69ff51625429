"""S3 blobs: content-addressed bytes under the project's customer-managed KMS key.

`S3BlobStore` keeps the bytes a DynamoDB item cannot hold (checkpoint bodies
and run texts over the store's inline limit); `S3ArtifactStore` keeps run
artifacts. Both are the same seam as `stores.artifacts.LocalArtifactStore`:
`put(data, media_type=...) -> (uri, sha256)` and `get(uri) -> bytes`.

* Content addressed: the key is `<prefix><sha256[:2]>/<sha256>`, so a retried
  put of the same bytes names the same object and a shared blob is stored once.
* `IfNoneMatch="*"`: a put never overwrites an object; an existing one (412,
  or 409 when two puts race) already holds these bytes.
* Every put names SSE-KMS with the given key and a bucket key, whatever the
  bucket's default, and sends its SHA-256 so S3 rejects bytes damaged in flight.
* Every read checks the bytes against the sha256 in the key (`CorruptRecord`
  on a mismatch, never the bytes). A missing object is `CorruptRecord` too: a
  store only asks for blobs its records name.

Objects are never deleted here: a blob may be shared by several runs, so the
bucket's lifecycle rule (template.yaml) retires them.
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import boto3
from botocore.exceptions import ClientError

from stores.base import CorruptRecord, StoreUnavailable

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

# S3 answers a put refused by IfNoneMatch with 412, and with 409 when another
# put of the same key is in flight: either way the object is (being) written
# with the same bytes, since the key is their hash.
_ALREADY_STORED = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})


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
        self.client: S3Client = client if client is not None else boto3.client("s3")

    def key_of(self, sha256: str) -> str:
        return f"{self.prefix}{sha256[:2]}/{sha256}"

    def uri_of(self, sha256: str) -> str:
        return f"s3://{self.bucket}/{self.key_of(sha256)}"

    def put(self, data: bytes, *, media_type: str = "application/octet-stream") -> tuple[str, str]:
        """Store `data` once; return (uri, sha256). Re-putting the same bytes is a no-op."""
        digest = hashlib.sha256(data)
        sha256 = digest.hexdigest()
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self.key_of(sha256), Body=data, ContentType=media_type,
                IfNoneMatch="*", ServerSideEncryption="aws:kms", SSEKMSKeyId=self.kms_key_id,
                BucketKeyEnabled=True,
                ChecksumSHA256=base64.b64encode(digest.digest()).decode("ascii"))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in _ALREADY_STORED:
                self._check_bucket(error, "PutObject")
                raise
        return self.uri_of(sha256), sha256

    def get(self, uri: str) -> bytes:
        """The bytes at `uri`, checked against the sha256 their key names."""
        bucket, key = _parse(uri)
        # Any prefix of this bucket: records keep the uri they were written
        # with, and the prefix may have been configured differently since.
        if bucket != self.bucket:
            raise ValueError(f"{uri!r} is not in this blob store's bucket ({self.bucket})")
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
