"""Fixtures of the model driver tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_provider_server import FakeProviderServer


@pytest.fixture
def server() -> Iterator[FakeProviderServer]:
    """A fake provider on 127.0.0.1, answering with the replies a test adds."""
    with FakeProviderServer() as fake:
        yield fake
