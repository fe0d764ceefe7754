"""Delivery: claimed once, every attempt logged, transient retried later, permanent stopped."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from perfweb.alerts import services
from perfweb.alerts.channels import http
from perfweb.alerts.delivery import delivery_send
from perfweb.alerts.models import Channel, Delivery, DeliveryAttempt
from perfweb.alerts.sweep import deliveries_sweep
from tests.alerts.receiver import Receiver
from tests.alerts.smtp_sink import SmtpSink

pytestmark = pytest.mark.django_db


def channel_for(project: Any, *, kind: str = "webhook", **config: str) -> Channel:
    return services.channel_create(project=project, kind=kind, name=kind, config=config)


def queued_test_message(channel: Channel, owner: Any) -> int:
    return services.channel_send_test(channel=channel, user=owner, enqueue=None)


def test_it_delivers_the_payload_and_logs_the_attempt(
    project: Any, owner: Any, receiver: Receiver
) -> None:
    delivery_id = queued_test_message(channel_for(project, url=receiver.url), owner)
    assert delivery_send(delivery_id=delivery_id) == "ok"
    body = receiver.wait_for(1)[0]
    assert body["event"] == "test" and body["project"]["name"] == "vision"
    assert receiver.got[0].headers["Idempotency-Key"] == body["id"]
    delivery = Delivery.objects.get(id=delivery_id)
    assert delivery.delivered_at is not None and delivery.attempts == 1
    attempt = DeliveryAttempt.objects.get()
    assert (attempt.outcome, attempt.detail) == ("ok", "HTTP 200")


def test_it_sends_once_when_the_task_runs_twice(
    project: Any, owner: Any, receiver: Receiver
) -> None:
    delivery_id = queued_test_message(channel_for(project, url=receiver.url), owner)
    outcomes = [delivery_send(delivery_id=delivery_id) for _ in range(3)]
    assert outcomes == ["ok", None, None]
    assert len(receiver.got) == 1


def test_it_does_not_send_a_delivery_another_worker_holds(
    project: Any, owner: Any, receiver: Receiver
) -> None:
    delivery_id = queued_test_message(channel_for(project, url=receiver.url), owner)
    Delivery.objects.filter(id=delivery_id).update(claimed_at=timezone.now())
    assert delivery_send(delivery_id=delivery_id) is None
    assert receiver.got == []


def test_it_retakes_a_claim_left_by_a_dead_worker(
    project: Any, owner: Any, receiver: Receiver
) -> None:
    delivery_id = queued_test_message(channel_for(project, url=receiver.url), owner)
    dead = timezone.now() - timedelta(minutes=5)
    Delivery.objects.filter(id=delivery_id).update(claimed_at=dead, attempts=1)
    swept: list[int] = []
    DeliveryAttempt.objects.create(
        delivery_id=delivery_id,
        channel_id=Delivery.objects.get(id=delivery_id).channel_id,
        at=dead,
        outcome="started",
    )  # as the dead worker left it
    assert deliveries_sweep(now=timezone.now(), enqueue=lambda i, d: swept.append(i)) == [
        delivery_id
    ]
    assert delivery_send(delivery_id=swept[0]) == "ok"
    assert Delivery.objects.get(id=delivery_id).attempts == 2
    assert len(receiver.got) == 1
    outcomes = list(DeliveryAttempt.objects.order_by("at").values_list("outcome", flat=True))
    assert outcomes == ["interrupted", "ok"]


@pytest.mark.parametrize("status", [500, 503, 429])
def test_it_retries_a_transient_failure_later(
    project: Any,
    owner: Any,
    receiver: Receiver,
    status: int,
    django_capture_on_commit_callbacks: Any,
) -> None:
    receiver.statuses = [status]
    receiver.headers_out = {"Retry-After": "45"} if status == 429 else {}
    delivery_id = queued_test_message(channel_for(project, url=receiver.url), owner)
    queued: list[tuple[int, float]] = []
    with django_capture_on_commit_callbacks(execute=True):
        outcome = delivery_send(delivery_id=delivery_id, enqueue=lambda i, d: queued.append((i, d)))
    assert outcome == "transient"
    delivery = Delivery.objects.get(id=delivery_id)
    assert delivery.claimed_at is None and delivery.delivered_at is None
    assert delivery.failed_at is None
    assert delivery.due_at > timezone.now()
    assert queued == [(delivery_id, 45.0 if status == 429 else 5)]
    assert delivery_send(delivery_id=delivery_id) is None  # not due yet
    Delivery.objects.filter(id=delivery_id).update(due_at=timezone.now())
    assert delivery_send(delivery_id=delivery_id) == "ok"
    outcomes = list(DeliveryAttempt.objects.order_by("at").values_list("outcome", flat=True))
    assert outcomes == ["transient", "ok"]


def test_it_retries_a_timeout(
    project: Any, owner: Any, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "TIMEOUT_S", 0.3)
    receiver.delay_s = 1.0
    delivery_id = queued_test_message(channel_for(project, url=receiver.url), owner)
    assert delivery_send(delivery_id=delivery_id) == "transient"


def test_it_stops_on_a_permanent_failure_and_shows_it_on_the_channel(
    project: Any, owner: Any, receiver: Receiver
) -> None:
    receiver.statuses = [404]
    channel = channel_for(project, url=receiver.url)
    delivery_id = queued_test_message(channel, owner)
    assert delivery_send(delivery_id=delivery_id) == "permanent"
    delivery = Delivery.objects.get(id=delivery_id)
    assert delivery.failed_at is not None
    Delivery.objects.filter(id=delivery_id).update(due_at=timezone.now())
    assert delivery_send(delivery_id=delivery_id) is None
    channel.refresh_from_db()
    assert channel.last_error.startswith("HTTP 404")
    assert deliveries_sweep(now=timezone.now(), enqueue=lambda i, d: None) == []


def test_it_treats_a_bad_url_as_permanent(project: Any, owner: Any) -> None:
    delivery_id = queued_test_message(channel_for(project, url="ftp://example.invalid/x"), owner)
    assert delivery_send(delivery_id=delivery_id) == "permanent"


def test_it_treats_a_refused_connection_as_transient(project: Any, owner: Any) -> None:
    delivery_id = queued_test_message(channel_for(project, url="http://127.0.0.1:9/hook"), owner)
    assert delivery_send(delivery_id=delivery_id) == "transient"


def test_it_gives_up_after_the_last_backoff(project: Any, owner: Any) -> None:
    channel = channel_for(project, url="http://127.0.0.1:9/hook")
    delivery_id = queued_test_message(channel, owner)
    for _ in range(6):
        Delivery.objects.filter(id=delivery_id).update(due_at=timezone.now())
        delivery_send(delivery_id=delivery_id)
    delivery = Delivery.objects.get(id=delivery_id)
    assert delivery.failed_at is not None and delivery.attempts == 6
    assert "gave up after 6 attempts" in delivery.last_error


def test_it_sends_slack_a_readable_message(project: Any, owner: Any, receiver: Receiver) -> None:
    delivery_id = queued_test_message(channel_for(project, kind="slack", url=receiver.url), owner)
    assert delivery_send(delivery_id=delivery_id) == "ok"
    body = receiver.wait_for(1)[0]
    assert body["text"].startswith("[TEST]")
    assert body["blocks"][0]["type"] == "section"


def test_it_sends_email_through_djangos_mail_settings(project: Any, owner: Any) -> None:
    channel = channel_for(project, kind="email", to="oncall@example.com")
    delivery_id = queued_test_message(channel, owner)
    assert delivery_send(delivery_id=delivery_id) == "ok"
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["oncall@example.com"]
    assert mail.outbox[0].subject.startswith("[TEST]")


def test_it_resends_a_message_the_broker_lost_but_not_a_fresh_one(project: Any, owner: Any) -> None:
    channel = channel_for(project, url="http://127.0.0.1:9/hook")
    fresh = queued_test_message(channel, owner)
    lost = queued_test_message(channel, owner)
    Delivery.objects.filter(id=lost).update(due_at=timezone.now() - timedelta(minutes=5))
    assert deliveries_sweep(now=timezone.now(), enqueue=lambda i, d: None) == [lost]
    assert fresh != lost


@pytest.mark.parametrize(
    ("rcpt_reply", "outcome"),
    [("250 OK", "ok"), ("550 no such user", "permanent"), ("451 try again later", "transient")],
)
def test_it_sends_email_through_a_real_smtp_server(
    project: Any, owner: Any, settings: Any, rcpt_reply: str, outcome: str
) -> None:
    with SmtpSink(reply_to_rcpt=rcpt_reply) as sink:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", sink.port
        channel = channel_for(project, kind="email", to="oncall@example.com")
        assert delivery_send(delivery_id=queued_test_message(channel, owner)) == outcome
    if outcome == "ok":
        ((recipients, raw),) = sink.messages
        assert recipients == ["oncall@example.com"]
        assert "Subject: [TEST]" in raw
    else:
        assert sink.messages == []
