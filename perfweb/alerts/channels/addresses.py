"""Where an alert channel may send: public addresses only, unless the operator allows more.

A webhook URL is typed by any project member, and the worker that sends it sits inside the
operator's network. So the URL's host is resolved and every address it resolves to must be
public: loopback, private (RFC 1918, unique-local), link-local (169.254/16, fe80::/10, where
cloud metadata services answer), unspecified (0.0.0.0, ::), multicast and reserved ranges
are refused, and so are the metadata host names. This runs when the channel is saved and
again at each send (DNS can change in between); the send then connects to the address that
was checked, never to a second lookup.

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
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
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


def refusal(address: IPAddress) -> str | None:
    """Why `address` is not public (a fixed phrase), or None when it is."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    checks = (
        ("is_unspecified", "an unspecified address"),
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address"),
        ("is_private", "a private address"),
        ("is_multicast", "a multicast address"),
        ("is_reserved", "a reserved address"),
    )
    for attribute, phrase in checks:
        if getattr(address, attribute):
            return phrase
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
