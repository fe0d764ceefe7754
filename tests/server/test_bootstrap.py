"""`manage.py bootstrap`: a user, a project and a token, non-interactively and idempotently."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from perfweb.projects.models import IngestToken, Membership, Project
from perfweb.projects.services import token_authenticate

pytestmark = pytest.mark.django_db


def bootstrap(*args: str) -> str:
    out = io.StringIO()
    call_command(
        "bootstrap", "--user", "demo", "--password", "demo", "--project", "demo", *args, stdout=out
    )
    [line] = out.getvalue().splitlines()
    assert line.startswith("token=")
    return line.removeprefix("token=")


def test_it_creates_a_user_a_project_and_a_working_token() -> None:
    token = bootstrap()
    user = get_user_model().objects.get(username="demo")
    assert user.check_password("demo")
    project = Project.objects.get(name="demo")
    assert Membership.objects.filter(user=user, project=project).exists()
    assert token_authenticate(token=token) == project


def test_it_reuses_the_user_and_project_when_run_again() -> None:
    first, second = bootstrap(), bootstrap()
    assert get_user_model().objects.count() == 1 and Project.objects.count() == 1
    assert token_authenticate(token=first) and token_authenticate(token=second)


def test_it_installs_a_given_token_once() -> None:
    assert bootstrap("--token", "pw_given-token-123") == "pw_given-token-123"
    assert bootstrap("--token", "pw_given-token-123") == "pw_given-token-123"
    assert IngestToken.objects.count() == 1
    assert token_authenticate(token="pw_given-token-123") is not None


def test_it_keeps_the_token_in_a_token_file(tmp_path: Path) -> None:
    token_file = tmp_path / "secrets" / "token"
    first = bootstrap("--token-file", str(token_file))
    assert token_file.read_text().strip() == first
    assert token_file.stat().st_mode & 0o077 == 0
    assert bootstrap("--token-file", str(token_file)) == first
    assert IngestToken.objects.count() == 1


def test_it_refuses_a_token_of_another_project() -> None:
    bootstrap("--token", "pw_given-token-123")
    with pytest.raises(CommandError, match="another project"):
        call_command(
            "bootstrap",
            "--user",
            "x",
            "--password",
            "x",
            "--project",
            "other",
            "--token",
            "pw_given-token-123",
            stdout=io.StringIO(),
        )
