"""Encryption at rest for the local stores: the stored body is `codec(JSON)`.

The SQLite and file stores keep run state (variables, prompts, outputs, tool
results) as JSON texts. With a key in `AGENT_RUNTIME_STORE_KEY`, every text
they write goes through the AES-GCM codec instead: a random 96-bit nonce and
the ciphertext with its 128-bit tag, so the bytes on disk hold none of the
JSON. The codec is named beside the format of what it wrote (the file store's
header tag `arf1+aesgcm1`, a SQLite column's `aesgcm1:` prefix), so a reader
knows which codec to undo and a store can hold both: plain texts written
before a key was set stay readable, and new writes are encrypted.

The key, in `AGENT_RUNTIME_STORE_KEY`:

* `base64:<32 bytes in base64>` (or just the base64): AES-256 (16 or 24 bytes
  give AES-128 or AES-192). Make one with
  `python -c "import os, base64; print(base64.b64encode(os.urandom(32)).decode())"`;
* `kms:<base64 CiphertextBlob>`: a KMS data key (`aws kms generate-data-key
  --key-spec AES_256`), decrypted once per process with the caller's AWS
  credentials, so the plaintext key is never written down.

What is never encrypted: ids, statuses, timestamps and counters kept in
their own columns or file headers, which the stores query and lock on.

A text written with the codec and read without a key, or with another key,
raises `StoreKeyError` naming the variable — never garbage, never a silent
fallback to plain text.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
from typing import TYPE_CHECKING, Final

from stores.base import StoreError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_VARIABLE: Final = "AGENT_RUNTIME_STORE_KEY"
AES_GCM: Final = "aesgcm1"
_NONCE_BYTES: Final = 12
_TEXT_PREFIX: Final = f"{AES_GCM}:"


class StoreKeyError(StoreError):
    """Encrypted run state without its key, with a wrong key, or a malformed key."""


@functools.lru_cache(maxsize=4)
def _cipher(setting: str) -> AESGCM:
    """The AES-GCM cipher of a key setting (cached: a KMS key is decrypted once)."""
    # Imported only with a key set: a store without one never loads cryptography.
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: PLC0415

    if setting.startswith("kms:"):
        key = _kms_data_key(setting.removeprefix("kms:"))
    else:
        try:
            key = base64.b64decode(setting.removeprefix("base64:"), validate=True)
        except (binascii.Error, ValueError):
            raise StoreKeyError(f"{KEY_VARIABLE} is not base64 (expected base64:<key>, "
                                "or kms:<encrypted data key>)") from None
    if len(key) not in (16, 24, 32):
        raise StoreKeyError(f"{KEY_VARIABLE} holds a {len(key)}-byte key; AES-GCM needs "
                            "16, 24 or 32 bytes (32 recommended)")
    return AESGCM(key)


def _kms_data_key(blob: str) -> bytes:
    try:
        ciphertext = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise StoreKeyError(f"{KEY_VARIABLE}: the kms: data key is not base64") from None
    # Only for a KMS-wrapped key: botocore comes with the aws extra.
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    from stores import aws_clients  # noqa: PLC0415

    try:
        plaintext: bytes = aws_clients.client("kms").decrypt(CiphertextBlob=ciphertext)["Plaintext"]
    except (BotoCoreError, ClientError) as error:
        raise StoreKeyError(f"{KEY_VARIABLE}: KMS could not decrypt the data key: "
                            f"{type(error).__name__}") from None
    return plaintext


def _configured() -> AESGCM | None:
    setting = os.environ.get(KEY_VARIABLE, "").strip()
    return _cipher(setting) if setting else None


def _required(what: str) -> AESGCM:
    cipher = _configured()
    if cipher is None:
        raise StoreKeyError(f"{what} is encrypted ({AES_GCM}) and {KEY_VARIABLE} is not set")
    return cipher


def writing_codec() -> str | None:
    """The codec new writes use: `aesgcm1` with a key configured, else None (plain)."""
    return AES_GCM if _configured() is not None else None


def seal_bytes(data: bytes) -> tuple[str | None, bytes]:
    """(codec name or None, stored bytes) of `data` under the configured codec."""
    cipher = _configured()
    if cipher is None:
        return None, data
    nonce = os.urandom(_NONCE_BYTES)
    return AES_GCM, nonce + cipher.encrypt(nonce, data, None)


def open_bytes(codec: str | None, stored: bytes, what: str) -> bytes:
    """The bytes `seal_bytes` was given, from what it returned."""
    if codec is None:
        return stored
    if codec != AES_GCM:
        raise StoreKeyError(f"{what} is stored with codec {codec!r}, which this version "
                            "does not know")
    cipher = _required(what)
    from cryptography.exceptions import InvalidTag  # noqa: PLC0415

    try:
        return cipher.decrypt(stored[:_NONCE_BYTES], stored[_NONCE_BYTES:], None)
    except InvalidTag:
        raise StoreKeyError(f"{what} could not be decrypted with the key in {KEY_VARIABLE} "
                            "(a different key, or the stored bytes were altered)") from None


def seal_text(text: str) -> str:
    """A JSON text as a column stores it: itself, or `aesgcm1:<base64>` with a key."""
    if _configured() is None:
        return text  # not even encoded: a checkpoint body can be megabytes
    codec, stored = seal_bytes(text.encode())
    if codec is None:
        return text
    return f"{codec}:{base64.b64encode(stored).decode('ascii')}"


def open_text(stored: str, what: str) -> str:
    """The JSON text of a column written by `seal_text` (plain JSON passes through)."""
    if not stored.startswith(_TEXT_PREFIX):
        return stored
    try:
        data = base64.b64decode(stored.removeprefix(_TEXT_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise StoreKeyError(f"{what}: its {AES_GCM} text is not base64") from None
    try:
        return open_bytes(AES_GCM, data, what).decode()
    except UnicodeDecodeError:
        raise StoreKeyError(f"{what}: decrypted text is not UTF-8") from None
