from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from perfweb.pages import nav
from tests.dashboard.conftest import login

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_links(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nav, "_links", [])


def test_it_shows_links_other_apps_registered(client: Client, owner: Any) -> None:
    nav.register_nav_link(nav.NavLink(label="Admin", url_name="admin:index", prefix="/admin/"))
    nav.register_nav_link(nav.NavLink(label="Ghost", url_name="ghost:index", prefix="/ghost/"))
    page = login(client, owner).get("/").content.decode()
    assert '<a href="/admin/" class="">Admin</a>' in page
    assert "Ghost" not in page  # a link whose URL does not resolve is left out


def test_it_shows_no_navigation_to_anonymous_visitors(client: Client) -> None:
    nav.register_nav_link(nav.NavLink(label="Admin", url_name="admin:index", prefix="/admin/"))
    assert "Admin" not in client.get("/login/").content.decode()
