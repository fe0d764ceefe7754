"""Webhook and Slack URLs reach globally reachable addresses only (every DNS answer, every
IPv6 form of an IPv4 address): checked when saved and when sent, no redirects followed, and
nothing of a reply's body stored or shown. No test here sends to anything but loopback:
the other addresses are resolved and checked, and a tripwire stands in for the connection."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from django.urls import reverse

from perfweb.alerts import services
from perfweb.alerts.channels.addresses import BlockedAddress, check_url
from perfweb.alerts.delivery import delivery_send
from perfweb.alerts.models import Channel, Delivery, DeliveryAttempt
from tests.alerts.conftest import login
from tests.alerts.receiver import Receiver

pytestmark = pytest.mark.django_db

REFUSED = [
    ("ftp://example.com/hook", "only http:// and https:// URLs are allowed"),
    ("file:///etc/passwd", "only http:// and https:// URLs are allowed"),
    ("http://127.0.0.1:8000/hook", "resolves to a loopback address (127.0.0.1)"),
    ("http://localhost/hook", "localhost resolves to a loopback address"),
    ("http://[::1]/hook", "resolves to a loopback address (::1)"),
    ("http://[::ffff:127.0.0.1]/hook", "resolves to a loopback address"),
    ("http://0.0.0.0/hook", "resolves to an unspecified address (0.0.0.0)"),
    ("http://10.1.2.3/hook", "resolves to a private address (10.1.2.3)"),
    ("http://192.168.0.10/hook", "resolves to a private address"),
    ("http://172.16.5.4/hook", "resolves to a private address"),
    ("http://169.254.169.254/latest/meta-data", "resolves to a cloud metadata address"),
    ("http://169.254.10.10/", "resolves to a link-local address"),
    ("http://[fe80::1]/", "resolves to a link-local address"),
    ("http://metadata.google.internal/computeMetadata/v1/", "is a cloud metadata host"),
    ("http://2130706433/hook", "resolves to a loopback address"),  # 127.0.0.1 as one number
    # issue 27: globally reachable only, by IANA's special-purpose registries
    ("http://100.64.0.1/", "resolves to a shared (carrier-grade NAT) address (100.64.0.1)"),
    ("http://100.100.100.200/latest/meta-data", "resolves to a cloud metadata address"),
    ("http://[::ffff:100.64.0.1]/", "resolves to a shared (carrier-grade NAT) address"),
    ("http://[::ffff:a9fe:a9fe]/", "resolves to a cloud metadata address"),
    ("http://[64:ff9b::7f00:1]/", "resolves to a loopback address"),  # NAT64 of 127.0.0.1
    ("http://[64:ff9b::6440:1]/", "resolves to a shared (carrier-grade NAT) address"),
    ("http://[64:ff9b:1::a00:1]/", "resolves to a local-use NAT64 address"),
    ("http://[2002:a00:1::1]/", "resolves to a private address"),  # 6to4 of 10.0.0.1
    ("http://[::a00:1]/", "resolves to a private address"),  # IPv4-compatible 10.0.0.1
    ("http://192.0.0.8/", "resolves to an IETF protocol address"),
    ("http://198.18.0.1/", "resolves to a benchmarking address"),
    ("http://203.0.113.9/", "resolves to a documentation address"),
    ("http://[2001:db8::1]/", "resolves to a documentation address"),
    ("http://240.0.0.1/", "resolves to a reserved address"),
    ("http://255.255.255.255/", "resolves to a broadcast address"),
    ("http://224.0.0.1/", "resolves to a multicast address"),
    ("http://[ff02::1]/", "resolves to a multicast address"),
    ("http://[100::1]/", "resolves to a discard-only address"),
    ("http://[2001::1]/", "resolves to an IETF protocol address"),  # Teredo
    ("http://0.1.2.3/", "resolves to a this-network address"),
]
# Globally reachable: checked (never sent to, by any test).
GLOBAL = [
    "http://8.8.8.8/h",
    "http://[::ffff:8.8.8.8]/h",
    "http://[64:ff9b::808:808]/h",
    "http://[2606:4700:4700::1111]/h",
    "http://[2002:808:808::1]/h",
]


@pytest.fixture
def nothing_allowed(settings: Any) -> None:
    settings.PERFWEB_ALERT_ALLOWED_NETWORKS = ""


@pytest.mark.parametrize(("url", "reason"), REFUSED)
def test_it_refuses_non_public_destinations_by_default(
    nothing_allowed: None, url: str, reason: str
) -> None:
    with pytest.raises(BlockedAddress) as error:
        check_url(url)
    assert reason in str(error.value)


def test_it_takes_globally_reachable_addresses_in_every_form(nothing_allowed: None) -> None:
    assert [check_url(url).address for url in GLOBAL] == [
        "8.8.8.8",
        "::ffff:808:808",
        "64:ff9b::808:808",
        "2606:4700:4700::1111",
        "2002:808:808::1",
    ]


def dns_answers(monkeypatch: pytest.MonkeyPatch, host: str, answers: list[str]) -> None:
    """`host` resolves to `answers` (numeric: the real getaddrinfo, no DNS traffic)."""
    real = socket.getaddrinfo

    def resolve(name: str, *args: Any, **kwargs: Any) -> Any:
        if name != host:
            return real(name, *args, **kwargs)
        return [info for answer in answers for info in real(answer, *args, **kwargs)]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)


def test_every_dns_answer_must_be_globally_reachable(
    nothing_allowed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    dns_answers(monkeypatch, "hooks.example.com", ["8.8.8.8", "100.64.0.1"])
    with pytest.raises(BlockedAddress) as error:
        check_url("https://hooks.example.com/h")
    assert str(error.value) == (
        "hooks.example.com resolves to a shared (carrier-grade NAT) address (100.64.0.1),"
        " which is refused"
    )
    dns_answers(monkeypatch, "hooks.example.com", ["8.8.8.8", "2606:4700:4700::1111"])
    assert check_url("https://hooks.example.com/h").address == "8.8.8.8"


@pytest.mark.parametrize("kind", ["webhook", "slack"])
def test_it_refuses_to_save_a_channel_to_an_internal_address(
    nothing_allowed: None, owner: Any, project: Any, kind: str
) -> None:
    client = login(owner)
    for url, reason in REFUSED[2:]:
        reply = client.post(
            reverse("alerts:channel_new", args=[project.id]),
            {"kind": kind, "name": "hook", "enabled": "on", "config-url": url},
        )
        assert reply.status_code == 400, url
        assert reason in reply.content.decode(), url
    assert not Channel.objects.exists()


def test_the_allow_list_names_networks_and_hosts(settings: Any) -> None:
    settings.PERFWEB_ALERT_ALLOWED_NETWORKS = "10.0.0.0/8,::1/128"
    assert check_url("http://10.20.30.40:8080/h?x=1").path == "/h?x=1"
    assert check_url("http://[::1]/h").address == "::1"
    with pytest.raises(BlockedAddress):
        check_url("http://192.168.1.1/h")
    settings.PERFWEB_ALERT_ALLOWED_NETWORKS = "metadata.google.internal"
    assert check_url("http://metadata.google.internal/", resolve=False).host == (
        "metadata.google.internal"
    )


@pytest.mark.parametrize(
    ("kind", "answer", "reason"),
    [
        ("webhook", "127.0.0.1", "a loopback address"),
        ("slack", "100.64.0.1", "a shared (carrier-grade NAT) address"),
        ("webhook", "::ffff:a9fe:a9fe", "a cloud metadata address"),
    ],
)
def test_it_checks_again_at_send_time_when_dns_changed(
    owner: Any, project: Any, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, settings: Any,
    kind: str, answer: str, reason: str,
) -> None:  # fmt: skip
    channel = services.channel_create(
        project=project,
        kind=kind,
        name="hook",
        config={"url": f"http://hooks.example.com:{receiver.url.split(':')[2]}"},
    )
    settings.PERFWEB_ALERT_ALLOWED_NETWORKS = ""
    dns_answers(monkeypatch, "hooks.example.com", [answer])  # the DNS answer now
    connected: list[Any] = []

    def tripwire(address: Any, *args: Any, **kwargs: Any) -> Any:  # no traffic, ever
        connected.append(address)
        raise ConnectionRefusedError

    monkeypatch.setattr(socket, "create_connection", tripwire)
    delivery_id = services.channel_send_test(channel=channel, user=owner, enqueue=None)
    assert delivery_send(delivery_id=delivery_id) == "permanent"
    attempt = DeliveryAttempt.objects.get()
    assert attempt.detail == f"hooks.example.com resolves to {reason} ({answer}), which is refused"
    assert receiver.got == [] and connected == []


def test_it_does_not_follow_a_redirect(owner: Any, project: Any, receiver: Receiver) -> None:
    receiver.statuses = [302]
    receiver.headers_out = {"Location": "http://169.254.169.254/latest/meta-data/"}
    channel = services.channel_create(
        project=project, kind="webhook", name="hook", config={"url": receiver.url}
    )
    delivery_id = services.channel_send_test(channel=channel, user=owner, enqueue=None)
    assert delivery_send(delivery_id=delivery_id) == "permanent"
    assert len(receiver.got) == 1
    channel.refresh_from_db()
    assert channel.last_error == "HTTP 302 Found: redirects are not followed"


@pytest.mark.parametrize(
    ("status", "outcome", "detail"),
    [
        (500, "transient", "HTTP 500 Internal Server Error"),
        (403, "permanent", "HTTP 403 Forbidden"),
    ],
)
def test_it_records_the_status_and_a_fixed_reason_never_the_body(
    owner: Any, project: Any, receiver: Receiver, status: int, outcome: str, detail: str
) -> None:
    receiver.statuses = [status]
    receiver.body_out = b"aws_secret_access_key=AKIA-internal-secret"
    channel = services.channel_create(
        project=project, kind="webhook", name="hook", config={"url": receiver.url}
    )
    delivery_id = services.channel_send_test(channel=channel, user=owner, enqueue=None)
    assert delivery_send(delivery_id=delivery_id) == outcome
    attempt = DeliveryAttempt.objects.get()
    assert attempt.detail == detail
    assert "secret" not in Delivery.objects.get(id=delivery_id).last_error
    client = login(owner)
    for page in (
        reverse("alerts:project", args=[project.id]),
        reverse("alerts:channel_edit", args=[project.id, channel.id]),
    ):
        text = client.get(page).content.decode()
        assert detail in text and "secret" not in text


def test_the_migration_forgets_reply_bodies_stored_before(project: Any) -> None:
    from importlib import import_module

    from django.apps import apps

    migration = import_module("perfweb.alerts.migrations.0005_forget_reply_bodies")
    channel = services.channel_create(
        project=project, kind="webhook", name="hook", config={"url": "https://example.com/"}
    )
    Channel.objects.filter(id=channel.id).update(last_error="HTTP 500: db password=hunter2")
    kept = Channel.objects.create(
        project=project, kind="webhook", name="b", config={}, last_error="connection refused"
    )
    migration.forget_bodies(apps, None)
    channel.refresh_from_db()
    kept.refresh_from_db()
    assert channel.last_error == "HTTP 500" and kept.last_error == "connection refused"


def test_an_https_receiver_gets_a_verified_tls_connection_to_the_checked_address(
    tmp_path: Any, owner: Any, project: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssl
    import subprocess
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    got: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            got.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/hook"
        channel = services.channel_create(
            project=project, kind="webhook", name="tls", config={"url": url}
        )
        delivery_id = services.channel_send_test(channel=channel, user=owner, enqueue=None)
        assert delivery_send(delivery_id=delivery_id) == "permanent"  # self-signed: refused
        assert DeliveryAttempt.objects.get().detail == "TLS certificate verification failed"
        assert got == []
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # now the receiver's CA is trusted
        delivery_id = services.channel_send_test(channel=channel, user=owner, enqueue=None)
        assert delivery_send(delivery_id=delivery_id) == "ok"
        assert got == ["/hook"]
        assert DeliveryAttempt.objects.filter(outcome="ok").get().detail == "HTTP 204"
    finally:
        server.shutdown()
        server.server_close()
