"""'Open in Perfetto' on a machine without internet: the page stops waiting and points to the
trace's download (perfweb/diagnostics/static/diagnostics/perfetto.js)."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

SCRIPT = (
    Path(__file__).resolve().parents[2]
    / "perfweb" / "diagnostics" / "static" / "diagnostics" / "perfetto.js"
)  # fmt: skip
ORIGIN = "http://perfweb.test"
PAGE = """<!doctype html><title>run</title>
<span class="trace-actions">
  <button type="button" data-action="perfetto" data-url="/trace.json.gz" data-title="rank0-step3-5"
          data-filename="run-rank0-step3-5.pt.trace.json.gz" data-give-up-ms="1500"
          >Open in Perfetto</button>
  <span data-perfetto-status></span>
</span>
<script src="/perfetto.js"></script>"""


@pytest.fixture
def offline_page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    trace = gzip.compress(b'{"traceEvents": []}')
    context.route(f"{ORIGIN}/", lambda route: route.fulfill(body=PAGE, content_type="text/html"))
    context.route(
        f"{ORIGIN}/perfetto.js",
        lambda route: route.fulfill(body=SCRIPT.read_text(), content_type="text/javascript"),
    )
    context.route(
        f"{ORIGIN}/trace.json.gz",
        lambda route: route.fulfill(body=trace, content_type="application/gzip"),
    )
    context.route("https://ui.perfetto.dev/**", lambda route: route.abort("internetdisconnected"))
    page = context.new_page()
    page.goto(f"{ORIGIN}/")
    yield page
    context.close()


def test_without_internet_it_stops_waiting_and_points_to_the_download(offline_page: Any) -> None:
    page = offline_page
    with page.expect_popup():
        page.click("[data-action=perfetto]")
    status = page.locator("[data-perfetto-status]")
    page.wait_for_function(
        "() => document.querySelector('[data-perfetto-status] a') !== null", timeout=15_000
    )
    assert status.inner_text().startswith("Perfetto did not answer in 2 s (no internet")
    link = page.locator("[data-action=download-instead]")
    assert link.get_attribute("href") == "/trace.json.gz"
    assert link.get_attribute("download") == "run-rank0-step3-5.pt.trace.json.gz"
