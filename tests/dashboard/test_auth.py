from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.conftest import PASSWORD
from tests.dashboard.conftest import login

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/", "/runs/vision-run-0001/"])
def test_it_sends_anonymous_visitors_to_the_login_page(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


def test_it_shows_a_login_form(client: Client) -> None:
    response = client.get("/login/")
    assert response.status_code == 200
    assert b'name="username"' in response.content
    assert b'name="password"' in response.content


def test_it_logs_in_and_goes_to_the_runs_list(client: Client, owner: Any) -> None:
    response = client.post("/login/", {"username": "owner", "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_it_rejects_a_wrong_password(client: Client, owner: Any) -> None:
    response = client.post("/login/", {"username": "owner", "password": "nope"})
    assert response.status_code == 200
    assert b"didn&#x27;t match" in response.content or b"didn't match" in response.content
    assert client.get("/").status_code == 302


def test_it_logs_out(client: Client, owner: Any) -> None:
    login(client, owner)
    page = client.get("/")
    assert b"owner" in page.content and b'action="/logout/"' in page.content
    response = client.post("/logout/")
    assert response.status_code == 302
    assert response["Location"] == "/login/"
    assert client.get("/").status_code == 302
