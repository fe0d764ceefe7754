"""Celery adapters: take ids, re-read state, safe to run twice (the database decides)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from perfweb.alerts import delivery as delivery_service
from perfweb.alerts import evaluation
from perfweb.alerts.sweep import deliveries_sweep


def enqueue_delivery(delivery_id: int, countdown: float = 0.0) -> None:
    deliver_task.apply_async((delivery_id,), countdown=countdown or None)


@shared_task(acks_late=True, ignore_result=True)
def deliver_task(delivery_id: int) -> None:
    delivery_service.delivery_send(delivery_id=delivery_id, enqueue=enqueue_delivery)


@shared_task(acks_late=True, ignore_result=True)
def alerts_tick_task() -> None:
    """Beat, every PERFWEB_ALERT_INTERVAL seconds: evaluate, remind, and re-find deliveries
    whose message the broker lost or whose worker died."""
    evaluation.alerts_evaluate(now=timezone.now(), enqueue=enqueue_delivery)
    deliveries_sweep(now=timezone.now(), enqueue=enqueue_delivery)
