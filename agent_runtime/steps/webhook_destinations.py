"""Where a `webhook` step may send: the destination checks.

Only http and https, and only public addresses: every block of the IANA
IPv4 and IPv6 special-purpose registries that the registry does not mark
globally reachable is refused, as are multicast and all IPv6 outside
2000::/3 (our own tables, not the interpreter's `is_global`). An
IPv6 address that embeds an IPv4 one (IPv4-mapped, IPv4-compatible,
IPv4-translated, NAT64 64:ff9b::/96, 6to4) is judged by the address it
embeds; local-use NAT64 (64:ff9b:1::/48) and Teredo (2001::/32) are refused
as they are. `webhooks.allowPrivateNetworks` lets through loopback, private
(RFC 1918, fc00::/7), link-local, shared (100.64.0.0/10) and unspecified
addresses, in whatever form, for a deployment whose receivers are local; the
other special blocks (documentation, benchmarking, reserved, protocol
assignments, multicast, ...) are never a receiver and stay refused. With
`webhooks.allowedHosts` only those hosts are called. Every resolved address
is checked and the request goes to a checked address (the name is kept for
`Host` and TLS), so a name cannot resolve to a public address for the check
and a private one for the request. Proxies from the environment are not used.

A refusal names the host the manifest wrote and the rule (`resolves to a
loopback address`), never the address a name resolved to: that is the host's
internal network, not the tenant's business.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from agent_runtime.config import WebhookPolicy
from agent_runtime.errors import StepFailed

__all__ = ["Destination", "destination_refusal", "host_allowed", "resolve_destination"]


def host_allowed(host: str, allowed_hosts: list[str]) -> bool:
    """`host` equals an entry, or is a subdomain of a `*.domain` entry (case-insensitive)."""
    host = host.lower().rstrip(".")
    for entry in allowed_hosts:
        pattern = entry.lower().rstrip(".")
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif host == pattern:
            return True
    return False


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class _Kind:
    """What makes an address non-public, as in "is a loopback address"."""

    label: str
    private_network: bool  # allowed by webhooks.allowPrivateNetworks


_LOOPBACK = _Kind("a loopback", private_network=True)
_PRIVATE = _Kind("a private", private_network=True)
_LINK_LOCAL = _Kind("a link-local", private_network=True)
_UNSPECIFIED = _Kind("an unspecified", private_network=True)
_SHARED = _Kind("a non-public", private_network=True)  # 100.64.0.0/10, carrier-grade NAT
_MULTICAST = _Kind("a multicast", private_network=False)
_SPECIAL = _Kind("a non-public", private_network=False)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _networks(*entries: tuple[str, _Kind]) -> tuple[tuple[Network, _Kind], ...]:
    return tuple((ipaddress.ip_network(network), kind) for network, kind in entries)


def _plain(*networks: str) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(network) for network in networks)


# The IANA IPv4 Special-Purpose Address Registry, less the blocks it marks
# globally reachable (192.31.196.0/24, 192.52.193.0/24, 192.175.48.0/24 and
# the two anycast addresses below), plus multicast. Our own table, not
# `ipaddress.is_global`: Python's lists change between releases (3.11 calls
# 192.0.0.8 global) and a webhook guard must not depend on the interpreter.
_IPV4_GLOBAL = _plain("192.0.0.9/32", "192.0.0.10/32")
_IPV4_SPECIAL = _networks(
    ("0.0.0.0/32", _UNSPECIFIED), ("0.0.0.0/8", _SPECIAL), ("10.0.0.0/8", _PRIVATE),
    ("100.64.0.0/10", _SHARED), ("127.0.0.0/8", _LOOPBACK), ("169.254.0.0/16", _LINK_LOCAL),
    ("172.16.0.0/12", _PRIVATE), ("192.0.0.0/24", _SPECIAL), ("192.0.2.0/24", _SPECIAL),
    ("192.88.99.0/24", _SPECIAL), ("192.168.0.0/16", _PRIVATE), ("198.18.0.0/15", _SPECIAL),
    ("198.51.100.0/24", _SPECIAL), ("203.0.113.0/24", _SPECIAL), ("224.0.0.0/4", _MULTICAST),
    ("240.0.0.0/4", _SPECIAL))

# IPv6: only the global unicast space (2000::/3) is public, less the IANA
# IPv6 Special-Purpose Address Registry's blocks in it that are not globally
# reachable. ORCHIDv2 (2001:20::/28) and drone entity tags (2001:30::/28) are
# identifiers, not locators: refused with the rest of 2001::/23.
_IPV6_GLOBAL = _plain("2001:1::1/128", "2001:1::2/128", "2001:1::3/128", "2001:3::/32",
                      "2001:4:112::/48")
_IPV6_SPECIAL = _networks(
    ("::/128", _UNSPECIFIED), ("::1/128", _LOOPBACK), ("fe80::/10", _LINK_LOCAL),
    ("fc00::/7", _PRIVATE), ("ff00::/8", _MULTICAST), ("2001::/23", _SPECIAL),
    ("2001:db8::/32", _SPECIAL), ("3fff::/20", _SPECIAL))
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")

# IPv6 forms that carry an IPv4 address in their low 32 bits: the address is
# judged by what it embeds.
_EMBEDDING_LOW_BITS = tuple((ipaddress.IPv6Network(network), form) for network, form in (
    ("::ffff:0:0/96", "IPv4-mapped"), ("::/96", "IPv4-compatible"),
    ("::ffff:0:0:0/96", "IPv4-translated"), ("64:ff9b::/96", "NAT64")))
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")  # the IPv4 address in bits 16-48
# Not judged by an embedded address: what a local-use NAT64 prefix reaches
# is up to its network, and Teredo's client address is obfuscated behind a
# relay. Both are refused as they are.
_NOT_EMBEDDING = _networks(("64:ff9b:1::/48", _SPECIAL), ("2001::/32", _SPECIAL))


def _lookup(address: Address, exceptions: tuple[Network, ...],
            special: tuple[tuple[Network, _Kind], ...]) -> _Kind | None:
    if any(address in network for network in exceptions):
        return None
    return next((kind for network, kind in special if address in network), None)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address carries, and the form that carries it."""
    if int(address) <= 1:  # :: and ::1 are themselves, not IPv4-compatible forms
        return None
    for network, form in _EMBEDDING_LOW_BITS:
        if address in network:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), form
    if address in _SIX_TO_FOUR:
        return ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF), "6to4"
    return None


def _address_kind(address: Address) -> tuple[_Kind, str] | None:
    """What makes an address non-public, and a note on how (an embedded IPv4
    address), or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner, form = embedded
            kind = _lookup(inner, _IPV4_GLOBAL, _IPV4_SPECIAL)
            return None if kind is None else (kind, f" (it embeds {inner} in {form} form)")
        address = ipaddress.IPv6Address(int(address))  # without a %scope
        kind = _lookup(address, (), _NOT_EMBEDDING) or _lookup(address, _IPV6_GLOBAL,
                                                                _IPV6_SPECIAL)
        if kind is None and address not in _GLOBAL_UNICAST:
            kind = _SPECIAL
        return None if kind is None else (kind, "")
    kind = _lookup(address, _IPV4_GLOBAL, _IPV4_SPECIAL)
    return None if kind is None else (kind, "")


def _address_refusal(host: str, address: Address, policy: WebhookPolicy, *,
                     literal: bool) -> str | None:
    """Why `address` (the URL's own IP literal, or one `host` resolved to) is refused.

    A resolved address is never named: it is what the host's own DNS says about
    its network (an internal address), and a tenant learns only the host it
    wrote and the rule it broke. A literal is the tenant's own text."""
    found = _address_kind(address)
    if found is None:
        return None
    kind, note = found
    if kind.private_network and policy.allow_private_networks:
        return None
    target = (f"webhook destination {host} is" if literal else
              f"webhook host {host!r} resolves to")
    advice = ("; set webhooks.allowPrivateNetworks: true in the runtime config to allow it"
              if kind.private_network else
              "; webhooks never call it (webhooks.allowPrivateNetworks allows only loopback, "
              "private, link-local and shared addresses)")
    return f"{target} {kind.label} address{note if literal else ''}{advice}"


def destination_refusal(url: str, policy: WebhookPolicy) -> str | None:
    """Why `url` may not be called, as far as is known without resolving it: the
    scheme, `allowedHosts`, and the kind of an IP-literal host. None otherwise."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        return f"webhook URLs must be http or https, not {parts.scheme or 'schemeless'}"
    host = parts.hostname
    if not host:
        return "the webhook URL has no host"
    try:
        parts.port  # noqa: B018 - raises for a malformed port
    except ValueError:
        return "the webhook URL has an invalid port"
    if policy.allowed_hosts is not None and not host_allowed(host, policy.allowed_hosts):
        return (f"webhook host {host!r} is not in the runtime config's webhooks.allowedHosts")
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        return None
    return _address_refusal(host, literal, policy, literal=True)


@dataclass(frozen=True)
class Destination:
    """A checked destination: requests go to its `addresses` (in order, the next
    when one refuses the connection), naming `host`."""

    scheme: str
    host: str
    port: int | None
    addresses: tuple[str, ...]


async def resolve_destination(url: str, policy: WebhookPolicy) -> Destination:
    """Resolve and check every address of `url`'s host; `StepFailed` when refused."""
    refusal = destination_refusal(url, policy)
    if refusal is not None:
        raise StepFailed("webhook_destination_refused", refusal)
    parts = urlsplit(url)
    host = parts.hostname or ""
    scheme = parts.scheme.lower()
    literal = True
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        literal = False
        port = parts.port or (443 if scheme == "https" else 80)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port,
                                                                 type=socket.SOCK_STREAM)
        except OSError as error:
            raise StepFailed("webhook_unresolvable",
                             f"webhook host {host!r} does not resolve: {error}") from error
        # sockaddr[0] of an IPv6 link-local address may carry a "%scope" suffix.
        addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0])
                                       for info in infos))
    for address in addresses:
        refusal = _address_refusal(host, address, policy, literal=literal)
        if refusal is not None:
            raise StepFailed("webhook_destination_refused", refusal)
    return Destination(scheme=scheme, host=host, port=parts.port,
                       addresses=tuple(str(address) for address in addresses))
