from __future__ import annotations

import gzip
from importlib import metadata, resources

import pytest
from django.test import Client

from perfweb.dashboard.templatetags.perfweb_format import duration, percent

PLOTLY_URL = f"/assets/plotly-{metadata.version('plotly')}.min.js"


def installed_plotly_js() -> bytes:
    return (resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()


def test_it_serves_plotly_from_the_installed_package(client: Client) -> None:
    response = client.get(PLOTLY_URL)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/javascript")
    assert response.content == installed_plotly_js()
    assert "immutable" in response["Cache-Control"]


def test_it_serves_plotly_gzipped_when_the_browser_accepts_it(client: Client) -> None:
    response = client.get(PLOTLY_URL, HTTP_ACCEPT_ENCODING="gzip, deflate")
    assert response["Content-Encoding"] == "gzip"
    assert gzip.decompress(response.content) == installed_plotly_js()
    assert len(response.content) < len(installed_plotly_js()) / 2


def test_it_answers_not_modified_for_a_cached_copy(client: Client) -> None:
    etag = client.get(PLOTLY_URL)["ETag"]
    assert client.get(PLOTLY_URL, HTTP_IF_NONE_MATCH=etag).status_code == 304


def test_it_answers_404_for_another_plotly_version(client: Client) -> None:
    assert client.get("/assets/plotly-0.0.1.min.js").status_code == 404


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "—"), (12.7, "12s"), (125, "2m 05s"), (3725, "1h 02m"), (90000, "1d 01h")],
)
def test_it_formats_durations_like_the_browser(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_it_formats_percentages() -> None:
    assert percent(None) == "—"
    assert percent(80.6) == "81%"
