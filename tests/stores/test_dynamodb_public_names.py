"""`stores.dynamodb`'s public names import as users write them, and only when used."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def test_the_public_classes_import_from_the_package() -> None:
    from stores.dynamodb import DynamoDbRunStore, S3ArtifactStore, S3BlobStore
    from stores.dynamodb.s3 import S3BlobStore as defined_blobs
    from stores.dynamodb.store import DynamoDbRunStore as defined_store

    assert DynamoDbRunStore is defined_store and S3BlobStore is defined_blobs
    assert issubclass(S3ArtifactStore, S3BlobStore)


def test_an_unknown_name_is_an_attribute_error() -> None:
    import stores.dynamodb

    with pytest.raises(AttributeError, match="NoSuchStore"):
        stores.dynamodb.NoSuchStore  # noqa: B018


def test_importing_the_package_or_slices_does_not_load_the_store() -> None:
    code = textwrap.dedent("""
        import sys
        import stores.dynamodb
        import stores.dynamodb.slices
        print("stores.dynamodb.store" in sys.modules)
        from stores.dynamodb import DynamoDbRunStore
        print("stores.dynamodb.store" in sys.modules, DynamoDbRunStore.__name__)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["False", "True", "DynamoDbRunStore"]
