"""Writes of the fleet app: a project's GPU prices."""

from __future__ import annotations

from perfweb.fleet.models import GpuPrice
from perfweb.projects.models import Project

MAX_PRICE = 1_000_000.0


def gpu_price_set(*, project: Project, model: str, price: str) -> GpuPrice:
    """Sets the project's price per GPU-hour for GPUs whose name contains `model` (`*`: any
    other); ValueError with one line for a bad model or price."""
    model = model.strip()
    if not model or len(model) > 100 or any(ord(c) < 32 for c in model):
        raise ValueError("the GPU model is empty, too long or has control characters")
    try:
        value = float(price)
    except ValueError:
        raise ValueError("the price is not a number") from None
    if not 0 <= value <= MAX_PRICE:
        raise ValueError(f"the price is not between 0 and {MAX_PRICE:g}")
    row, _ = GpuPrice.objects.update_or_create(
        project=project, model=model, defaults={"price_per_hour": value}
    )
    return row


def gpu_price_delete(*, project: Project, model: str) -> None:
    GpuPrice.objects.filter(project=project, model=model.strip()).delete()
