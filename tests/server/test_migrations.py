"""The models and their migrations agree: a model change without its migration fails here,
not on a user's `migrate`."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_every_model_change_has_its_migration() -> None:
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit:
        pytest.fail(f"models changed without a migration:\n{out.getvalue()}")
