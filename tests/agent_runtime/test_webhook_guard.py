"""The webhook guard against every special-purpose address, in every form: IPv6
that embeds IPv4 is judged by what it embeds, the IANA special-purpose blocks
are refused, and no connection is ever attempted for any of them — whether the
address is written in the URL (refused before the run exists) or a name
resolves to it (refused when the step runs)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

import httpx
import pytest
from engine_harness import Harness, manifest

from agent_runtime import RunStatus
from agent_runtime.config import WebhookPolicy, parse_config
from agent_runtime.errors import ConfigError
from agent_runtime.steps.webhook import destination_refusal

ALLOW_PRIVATE = WebhookPolicy(allowPrivateNetworks=True)

# (address, what the refusal calls it, allowed by allowPrivateNetworks)
EMBEDDED = [
    ("::ffff:127.0.0.1", "a loopback address (it embeds 127.0.0.1 in IPv4-mapped form)", True),
    ("::127.0.0.1", "a loopback address (it embeds 127.0.0.1 in IPv4-compatible form)", True),
    ("::ffff:0:127.0.0.1", "a loopback address (it embeds 127.0.0.1 in IPv4-translated form)",
     True),
    ("64:ff9b::127.0.0.1", "a loopback address (it embeds 127.0.0.1 in NAT64 form)", True),
    ("64:ff9b::10.0.0.1", "a private address (it embeds 10.0.0.1 in NAT64 form)", True),
    ("64:ff9b::a9fe:a9fe", "a link-local address (it embeds 169.254.169.254 in NAT64 form)",
     True),
    ("2002:7f00:1::1", "a loopback address (it embeds 127.0.0.1 in 6to4 form)", True),
    ("2002:c0a8:1::", "a private address (it embeds 192.168.0.1 in 6to4 form)", True),
    ("::ffff:192.0.0.8", "a non-public address (it embeds 192.0.0.8 in IPv4-mapped form)",
     False),
    ("64:ff9b::198.18.0.1", "a non-public address (it embeds 198.18.0.1 in NAT64 form)", False),
    ("2002:c000:8::", "a non-public address (it embeds 192.0.0.8 in 6to4 form)", False),
    ("64:ff9b:1::808:808", "a non-public address", False),  # local-use NAT64
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "a non-public address", False),  # Teredo
]
SPECIAL_IPV4 = [
    ("0.0.0.0", "an unspecified address", True),
    ("0.1.2.3", "a non-public address", False),
    ("10.1.2.3", "a private address", True),
    ("100.64.0.1", "a non-public address", True),  # shared address space (CGN)
    ("100.127.255.254", "a non-public address", True),
    ("127.0.0.2", "a loopback address", True),
    ("169.254.169.254", "a link-local address", True),
    ("172.16.0.1", "a private address", True),
    ("192.0.0.1", "a non-public address", False),
    ("192.0.0.8", "a non-public address", False),  # IPv4 dummy address
    ("192.0.0.170", "a non-public address", False),
    ("192.0.2.1", "a non-public address", False),
    ("192.88.99.1", "a non-public address", False),
    ("192.168.1.1", "a private address", True),
    ("198.18.0.1", "a non-public address", False),
    ("198.19.255.255", "a non-public address", False),
    ("198.51.100.1", "a non-public address", False),
    ("203.0.113.1", "a non-public address", False),
    ("224.0.0.1", "a multicast address", False),
    ("240.0.0.1", "a non-public address", False),
    ("255.255.255.255", "a non-public address", False),
]
SPECIAL_IPV6 = [
    ("::", "an unspecified address", True),
    ("::1", "a loopback address", True),
    ("100::1", "a non-public address", False),  # discard-only
    ("2001:2::1", "a non-public address", False),  # benchmarking
    ("2001:10::1", "a non-public address", False),  # ORCHID (deprecated)
    ("2001:20::1", "a non-public address", False),  # ORCHIDv2: an identifier, not a locator
    ("2001:db8::1", "a non-public address", False),
    ("3fff::1", "a non-public address", False),  # documentation (2024)
    ("5f00::1", "a non-public address", False),  # SRv6 SIDs
    ("4000::1", "a non-public address", False),  # outside 2000::/3
    ("fc00::1", "a private address", True),
    ("fd12:3456::1", "a private address", True),
    ("fe80::1", "a link-local address", True),
    ("fec0::1", "a non-public address", False),  # site-local (deprecated)
    ("ff02::1", "a multicast address", False),
]
REFUSED = EMBEDDED + SPECIAL_IPV4 + SPECIAL_IPV6
PUBLIC = ["8.8.8.8", "2606:4700:4700::1111", "64:ff9b::8.8.8.8", "2002:808:808::1",
          "192.0.0.9", "192.0.0.10", "192.31.196.1", "192.175.48.1", "2001:3::1",
          "2001:4:112::1", "2620:4f:8000::1"]


def literal_url(address: str) -> str:
    return f"http://[{address}]:8080/hook" if ":" in address else f"http://{address}:8080/hook"


@pytest.mark.parametrize(("address", "kind", "private_network"), REFUSED)
def test_special_addresses_are_refused_in_the_url(address: str, kind: str,
                                                  private_network: bool) -> None:
    refusal = destination_refusal(literal_url(address), WebhookPolicy())
    assert refusal is not None and f"is {kind}" in refusal
    allowed = destination_refusal(literal_url(address), ALLOW_PRIVATE)
    if private_network:
        assert allowed is None
    else:
        assert allowed is not None and "webhooks never call it" in allowed


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert destination_refusal(literal_url(address), WebhookPolicy()) is None


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every request the webhook step tries to send (none should be)."""
    attempted: list[str] = []

    async def send(self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any) -> Any:
        attempted.append(str(request.url))
        raise httpx.ConnectError("no connections in this test", request=request)

    monkeypatch.setattr(httpx.AsyncClient, "send", send)
    return attempted


@pytest.fixture
def resolves_to(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`hooks.test` resolves to the addresses put in the returned list."""
    addresses: list[str] = []
    real = asyncio.BaseEventLoop.getaddrinfo

    async def getaddrinfo(self: asyncio.AbstractEventLoop, host: Any, port: Any,
                          *args: Any, **kwargs: Any) -> Any:
        if host != "hooks.test":
            return await real(self, host, port, *args, **kwargs)  # type: ignore[arg-type]
        return [(socket.AF_INET6 if ":" in each else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (each, port, 0, 0) if ":" in each else (each, port)) for each in addresses]

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", getaddrinfo)
    return addresses


def hook(url: str, **extra: Any) -> dict[str, Any]:
    return {"id": "notify", "type": "webhook", "url": url, "body": {"n": 1}, **extra}


@pytest.mark.parametrize(("address", "kind", "private_network"), REFUSED)
def test_a_run_never_connects_to_a_special_address_in_the_url(
        connects: list[str], address: str, kind: str, private_network: bool) -> None:
    h = Harness()
    with pytest.raises(ConfigError) as refused:
        h.run(manifest(hook(literal_url(address))))
    assert refused.value.field == "steps[0].url" and f"is {kind}" in refused.value.reason
    assert connects == [] and h.store.list_runs().runs == []


@pytest.mark.parametrize(("address", "kind", "private_network"), REFUSED)
def test_a_name_resolving_to_a_special_address_is_refused_before_any_connect(
        connects: list[str], resolves_to: list[str], address: str, kind: str,
        private_network: bool) -> None:
    resolves_to.extend(["93.184.215.14", address])  # one bad address is enough to refuse
    h = Harness()
    result = h.run(manifest(hook("http://hooks.test/hook")))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "webhook_destination_refused"
    message = result.error["message"]
    rule = kind.partition(" (")[0]  # the embedded address of a 6to4 form is not named either
    assert f"webhook host 'hooks.test' resolves to {rule};" in message
    # The host and the rule, never the address the name resolved to (the host's network).
    assert str(ipaddress.ip_address(address)) not in message and address not in message
    assert connects == []
    assert h.store.list_effects(result.run_id) == []  # nothing reserved


def test_allow_private_networks_still_refuses_the_other_special_blocks(
        connects: list[str], resolves_to: list[str]) -> None:
    config = parse_config({"version": "1.0", "webhooks": {"allowPrivateNetworks": True}},
                          source="cfg")
    resolves_to.append("2002:c000:8::")  # 6to4 of 192.0.0.8
    result = Harness(config=config).run(manifest(hook("http://hooks.test/hook")))
    assert result.status is RunStatus.FAILED
    assert "webhooks never call it" in result.error["message"]
    assert connects == []

    resolves_to[:] = ["64:ff9b::7f00:1"]  # NAT64 of loopback: a private network, allowed
    result = Harness(config=config).run(manifest(hook("http://hooks.test/hook", retries=0)))
    assert result.error["type"] == "webhook_unreachable"  # it tried, and our hook refused
    assert connects == ["http://[64:ff9b::7f00:1]/hook"]
