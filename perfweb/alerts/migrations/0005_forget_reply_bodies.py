"""Failures used to keep up to 200 bytes of the receiver's reply ("HTTP 500: <body>"); the
body of an internal service is not the alert author's to read, so only the code is kept."""

import re

from django.db import migrations

# "HTTP 500: <body>", also at the end of a "gave up after N attempts: ..." summary.
TRAILING_BODY = re.compile(r"(HTTP \d{3}): .*$", re.DOTALL)


def forget_bodies(apps, schema_editor):  # type: ignore[no-untyped-def]
    for model, field in (
        ("DeliveryAttempt", "detail"),
        ("Delivery", "last_error"),
        ("Channel", "last_error"),
    ):
        rows = apps.get_model("alerts", model).objects
        for row_id, text in rows.filter(**{f"{field}__contains": "HTTP "}).values_list("id", field):
            cleaned = TRAILING_BODY.sub(r"\1", text)
            if cleaned != text:
                rows.filter(id=row_id).update(**{field: cleaned})


class Migration(migrations.Migration):
    dependencies = [
        ("alerts", "0004_attempt_started_interrupted"),
    ]

    operations = [migrations.RunPython(forget_bodies, migrations.RunPython.noop)]
