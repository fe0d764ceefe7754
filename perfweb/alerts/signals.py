"""A new project gets the default alert rules."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from perfweb.alerts.services import rules_ensure_defaults
from perfweb.projects.models import Project


@receiver(post_save, sender=Project, dispatch_uid="alerts_default_rules")
def project_created(
    sender: type[Project], instance: Project, created: bool, raw: bool = False, **kwargs: Any
) -> None:
    if created and not raw:
        rules_ensure_defaults(project=instance)
