"""Tokens & projects (/projects/): a member mints a named token (shown once, stored hashed),
lists and revokes it, invites people and creates projects; nobody reaches another project."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from perfweb.projects.models import IngestToken, Membership, Project
from perfweb.projects.services import token_authenticate
from tests.dashboard.conftest import login

pytestmark = pytest.mark.django_db


def _new_token(client: Client, project: Any, label: str) -> tuple[str, str]:
    page = client.post(f"/projects/{project.id}/tokens/new/", {"label": label}).content.decode()
    found = re.search(r'data-testid="new-token-value">(pw_[^<]+)<', page)
    assert found, page
    return found.group(1), page


def test_it_creates_a_named_token_that_the_ingest_api_accepts(
    client: Client, owner: Any, project: Any
) -> None:
    token, _ = _new_token(login(client, owner), project, "laptop")
    assert token_authenticate(token=token) == project
    stored = IngestToken.objects.get(project=project, label="laptop")
    assert token not in (stored.digest, stored.prefix) and token.startswith(stored.prefix)


def test_it_shows_a_token_once_and_lists_it_by_name_afterwards(
    client: Client, owner: Any, project: Any
) -> None:
    token, _ = _new_token(login(client, owner), project, "ci")
    listing = client.get("/projects/").content.decode()
    assert token not in listing
    assert "ci" in listing and token[:12] in listing


def test_it_revokes_a_token(client: Client, teammate: Any, project: Any) -> None:
    token, _ = _new_token(login(client, teammate), project, "old")
    stored = IngestToken.objects.get(label="old")
    response = client.post(f"/projects/{project.id}/tokens/{stored.id}/revoke/")
    assert response.status_code == 302
    assert token_authenticate(token=token) is None
    assert "revoked" in client.get("/projects/").content.decode()


def test_an_outsider_reaches_no_token_of_another_project(
    client: Client, outsider: Any, project: Any, token: str
) -> None:
    login(client, outsider)
    assert "vision" not in client.get("/projects/").content.decode()
    stored = IngestToken.objects.get(project=project)
    assert client.post(f"/projects/{project.id}/tokens/new/", {"label": "x"}).status_code == 404
    assert client.post(f"/projects/{project.id}/tokens/{stored.id}/revoke/").status_code == 404
    assert (
        client.post(f"/projects/{project.id}/members/new/", {"username": "outsider"}).status_code
        == 404
    )
    assert token_authenticate(token=token) == project
    assert not Membership.objects.filter(project=project, user=outsider).exists()


def test_it_invites_an_existing_user_without_touching_their_password(
    client: Client, owner: Any, outsider: Any, project: Any
) -> None:
    page = (
        login(client, owner)
        .post(f"/projects/{project.id}/members/new/", {"username": "outsider"})
        .content.decode()
    )
    assert Membership.objects.filter(project=project, user=outsider).exists()
    assert "their account and password are unchanged" in page
    outsider.refresh_from_db()
    assert outsider.check_password("correct horse battery staple")


def test_it_invites_a_new_person_with_a_password_shown_once(
    client: Client, owner: Any, project: Any
) -> None:
    page = (
        login(client, owner)
        .post(f"/projects/{project.id}/members/new/", {"username": "grace"})
        .content.decode()
    )
    password = re.search(r'data-testid="invited-password">([^<]+)<', page)
    assert password
    grace = get_user_model().objects.get(username="grace")
    assert grace.check_password(password.group(1))
    assert Membership.objects.filter(project=project, user=grace).exists()


def test_it_creates_a_project_but_never_joins_one_by_its_name(
    client: Client, owner: Any, other_project: Any
) -> None:
    login(client, owner)
    assert client.post("/projects/new/", {"name": "audio"}).status_code == 302
    assert Membership.objects.filter(project__name="audio", user=owner).exists()
    refused = client.post("/projects/new/", {"name": other_project.name})
    assert refused.status_code == 400 and "exists already" in refused.content.decode()
    assert not Membership.objects.filter(project=other_project, user=owner).exists()
    assert Project.objects.filter(name=other_project.name).count() == 1
