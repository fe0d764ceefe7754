"""FixVerification moves from the jobs app to diagnostics (issue 28: a finding's fix, its
verification and its measured gain have one owner). Only Django's state moves: the table
keeps its name (`jobs_fixverification`) and its rows, and jobs 0005 removes the model from the
jobs app's state once this has added it here. The content type follows, so that permissions
granted on the model stay with it."""

from collections.abc import Callable
from typing import Any

import django.db.models.deletion
from django.db import migrations, models


def _content_type_to(app_label: str) -> Callable[[Any, Any], None]:
    def move(apps: Any, schema_editor: Any) -> None:
        content_types = apps.get_model("contenttypes", "ContentType")
        other = "jobs" if app_label == "diagnostics" else "diagnostics"
        if content_types.objects.filter(app_label=app_label, model="fixverification").exists():
            return  # a content type made meanwhile (post_migrate) stands
        content_types.objects.filter(app_label=other, model="fixverification").update(
            app_label=app_label
        )

    return move


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("diagnostics", "0002_rundiagnosis_queued_at"),
        ("jobs", "0004_arm_metrics_agreement_tolerance"),
        ("runs", "0004_process_unsent_at"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="FixVerification",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("finding_id", models.CharField(max_length=100)),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("verified", "verified"),
                                    ("refuted", "refuted"),
                                    ("inconclusive", "inconclusive"),
                                ],
                                max_length=12,
                            ),
                        ),
                        ("measured_gain", models.FloatField()),
                        ("speedup", models.FloatField()),
                        ("ci_low", models.FloatField()),
                        ("ci_high", models.FloatField()),
                        ("reason", models.CharField(blank=True, max_length=200)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "job",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="jobs.job",
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="fix_verifications",
                                to="runs.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "jobs_fixverification",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("run", "finding_id"), name="fixverification_unique"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(_content_type_to("diagnostics"), _content_type_to("jobs")),
    ]
