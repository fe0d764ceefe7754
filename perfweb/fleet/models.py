"""A project's own GPU prices, set on the fleet page (they come before PERFWEB_GPU_PRICES)."""

from __future__ import annotations

from django.db import models

from perfweb.projects.models import Project


class GpuPrice(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="gpu_prices")
    model = models.CharField(max_length=100)  # matched inside the GPU's name; `*` = any
    price_per_hour = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "model"], name="gpuprice_unique")]
