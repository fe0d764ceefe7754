"""Projects created before the alerts app get the default rules (new ones get them from the
post_save signal in perfweb/alerts/signals.py)."""

from __future__ import annotations

from typing import Any

from django.db import migrations

# Frozen copy of services.DEFAULT_RULES with the conditions' defaults at the time of writing.
DEFAULTS = (
    ("low_utilization", True, 30, 5),
    ("idle_memory_held", True, 5, 10),
    ("stalled", True, 0, 10),
    ("throttling", True, 50, 5),
    ("step_regression", False, 25, 5),
    ("finding_gain", False, 20, 0),
)


def add_defaults(apps: Any, schema_editor: Any) -> None:
    project_model = apps.get_model("projects", "Project")
    rule_model = apps.get_model("alerts", "AlertRule")
    for project in project_model.objects.filter(alert_rules__isnull=True).distinct():
        rule_model.objects.bulk_create(
            rule_model(
                project=project,
                kind=kind,
                enabled=enabled,
                threshold=threshold,
                window_minutes=window,
            )
            for kind, enabled, threshold, window in DEFAULTS
        )


class Migration(migrations.Migration):
    dependencies = [("alerts", "0001_initial")]
    operations = [migrations.RunPython(add_defaults, migrations.RunPython.noop)]
