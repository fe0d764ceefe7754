"""Where an alert channel may send: public addresses only, unless the operator allows more.

A webhook URL is typed by any project member, and the worker that sends it sits inside the
operator's network. So the URL's host is resolved and every address it resolves to (every
DNS answer, not the first) must be globally reachable: `ipaddress`' `is_global`, and no
block of IANA's IPv4 and IPv6 special-purpose registries that is not globally reachable
(SPECIAL_PURPOSE: loopback, private, shared 100.64.0.0/10, link-local where cloud metadata
services answer, documentation, benchmarking, NAT64 local use, ...), whatever this Python's
`ipaddress` knows; an IPv6 address that carries an IPv4 one (IPv4-mapped, NAT64's
64:ff9b::/96, 6to4, IPv4-compatible) is judged by the IPv4 address too; the metadata host
names are refused by name. This runs when the channel is saved and again at each send (DNS
can change in between); the send then connects to the address that was checked, never to a
second lookup.

PERFWEB_ALERT_ALLOWED_NETWORKS   comma-separated networks (10.0.0.0/8, 127.0.0.1/32, ::1/128)
                                 or host names (hooks.corp.internal) that may be reached
                                 although they are not public: on-premises receivers.
                                 Empty by default.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError

from perfweb.alerts.channels.errors import PermanentError
from perfweb.env import env_str

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "instance-data"})
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
DEFAULT_PORTS = {"http": 80, "https": 443}


class BlockedAddress(PermanentError):
    """The URL points at an address the server does not send to (one sentence, no body)."""


@dataclass(frozen=True)
class Target:
    """A checked destination: where to connect (`address`) and what to call it (`host`)."""

    scheme: str
    host: str
    port: int
    address: str
    path: str


def allowed_entries() -> tuple[frozenset[str], tuple[IPNetwork, ...]]:
    """The operator's allow list: (host names, networks)."""
    raw = getattr(settings, "PERFWEB_ALERT_ALLOWED_NETWORKS", None)
    if raw is None:
        raw = env_str("PERFWEB_ALERT_ALLOWED_NETWORKS", default="")
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    names: set[str] = set()
    networks: list[IPNetwork] = []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            names.add(item.lower().rstrip("."))
    return frozenset(names), tuple(networks)


# The blocks of IANA's special-purpose address registries (iana-ipv4-special-registry,
# iana-ipv6-special-registry, 2025) that are not globally reachable, with what to call them;
# the few globally reachable exceptions inside 192.0.0.0/24 and 2001::/23 (anycast
# services no webhook is) are refused with their block. Multicast is its own registry.
SPECIAL_PURPOSE: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(block), phrase)
    for block, phrase in (
        ("0.0.0.0/32", "an unspecified address"),
        ("0.0.0.0/8", "a this-network address"),
        ("10.0.0.0/8", "a private address"),
        ("100.64.0.0/10", "a shared (carrier-grade NAT) address"),
        ("127.0.0.0/8", "a loopback address"),
        ("169.254.0.0/16", "a link-local address"),
        ("172.16.0.0/12", "a private address"),
        ("192.0.0.0/24", "an IETF protocol address"),
        ("192.0.2.0/24", "a documentation address"),
        ("192.88.99.0/24", "a 6to4 relay address"),
        ("192.168.0.0/16", "a private address"),
        ("198.18.0.0/15", "a benchmarking address"),
        ("198.51.100.0/24", "a documentation address"),
        ("203.0.113.0/24", "a documentation address"),
        ("224.0.0.0/4", "a multicast address"),
        ("255.255.255.255/32", "a broadcast address"),
        ("240.0.0.0/4", "a reserved address"),
        ("::/128", "an unspecified address"),
        ("::1/128", "a loopback address"),
        ("64:ff9b:1::/48", "a local-use NAT64 address"),
        ("100::/64", "a discard-only address"),
        ("100:0:0:1::/64", "a dummy-prefix address"),
        ("2001::/23", "an IETF protocol address"),
        ("2001:db8::/32", "a documentation address"),
        ("3fff::/20", "a documentation address"),
        ("5f00::/16", "a segment-routing address"),
        ("fc00::/7", "a private address"),
        ("fe80::/10", "a link-local address"),
        ("fec0::/10", "a site-local address"),
        ("ff00::/8", "a multicast address"),
    )
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052's well-known prefix
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated ::a.b.c.d


def refusal(address: IPAddress) -> str | None:
    """Why `address` is not globally reachable (a fixed phrase), or None when it is."""
    carried = carried_ipv4(address)
    if carried is not None:
        return refusal(carried)
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    for block, phrase in SPECIAL_PURPOSE:
        if address in block:
            return phrase
    if not address.is_global:  # what this Python's ipaddress knows besides
        return "an address that is not globally reachable"
    return None


def carried_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address that an IPv6 one stands for or routes to: IPv4-mapped, NAT64
    (64:ff9b::/96), 6to4 (2002::/16) or IPv4-compatible (::/96, not :: or ::1)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64 or (address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def split_url(url: str) -> SplitResult:
    """The URL's parts; BlockedAddress unless it is http(s) with a host."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise BlockedAddress("the URL is not valid") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise BlockedAddress("only http:// and https:// URLs are allowed")
    if not parts.hostname:
        raise BlockedAddress("the URL has no host")
    return parts


def check_url(url: str, *, resolve: bool = True) -> Target:
    """Resolve the URL's host and check every address; the first one is where to connect.

    Raises BlockedAddress (permanent) naming the reason, never anything from a reply.
    """
    parts = split_url(url)
    host = (parts.hostname or "").lower().rstrip(".")
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    names, networks = allowed_entries()
    if host in METADATA_HOSTS and host not in names:
        raise BlockedAddress(f"{host} is a cloud metadata host")
    addresses = _addresses(host, port) if resolve else []
    for address in addresses:
        reason = refusal(address)
        if reason and host not in names and not any(address in n for n in networks):
            raise BlockedAddress(f"{host} resolves to {reason} ({address}), which is refused")
    first = str(addresses[0]) if addresses else host
    return Target(scheme=parts.scheme, host=host, port=port, address=first, path=path)


def _addresses(host: str, port: int) -> list[IPAddress]:
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    else:
        return [literal]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise BlockedAddress(f"the host {host} does not resolve") from None
    found: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if address not in found:
            found.append(address)
    if not found:
        raise BlockedAddress(f"the host {host} does not resolve")
    return found


def validate_receiver_url(url: str) -> None:
    """Form validator of webhook and Slack URLs: the same check as at send time."""
    try:
        check_url(url)
    except BlockedAddress as error:
        raise ValidationError(str(error)) from None
