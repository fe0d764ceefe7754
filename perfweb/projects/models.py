"""Projects own runs; people reach them through memberships, agents through ingest tokens."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Project(models.Model):
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="membership_unique")
        ]


class IngestToken(models.Model):
    """A project's API token. Only its sha256 is kept: the token itself is shown once."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tokens")
    label = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=12)  # the first characters, to tell tokens apart
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.project})"
