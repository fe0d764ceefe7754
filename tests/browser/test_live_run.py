"""Log in, open the runs list, open the run an attached CPU script is streaming, and watch
its charts fill with real points that grow."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import LiveServer
from tests.browser.pages import log_in, record_failed_requests

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(420)]

COUNT_POINTS = """(id) => {
  const gd = document.getElementById(id);
  if (!gd || !gd.data) return {};
  const counts = {};
  for (const trace of gd.data) {
    const key = trace.meta.metric + "@" + trace.meta.device;
    counts[key] = trace.x.filter((x, i) => x !== null && Number.isFinite(trace.y[i])).length;
  }
  return counts;
}"""

X_RANGE_MS = """() => document.getElementById('timeline').layout.xaxis.range.map(
  (v) => typeof v === 'number' ? v : new Date(v.replace(' ', 'T') + 'Z').getTime())"""


def wait_until(check: Any, timeout_s: float, what: str, every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def test_it_streams_a_live_run_into_growing_charts(
    browser: Any, perfweb_server: LiveServer, attached_run: str, screenshot_dir: Path
) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    failed_requests: list[str] = []
    record_failed_requests(page, failed_requests)
    page.on("pageerror", lambda error: failed_requests.append(f"page error: {error}"))

    page.goto(f"{perfweb_server.url}/")
    assert "/login/" in page.url
    page.screenshot(path=str(screenshot_dir / "01-login.png"))
    log_in(page, perfweb_server.url)

    # The runs list picks the new run up by polling, with its live status.
    row = page.locator("tr[data-run-id]", has_text=attached_run)
    row.wait_for(timeout=90_000)
    assert row.locator(".status-running").count() == 1
    page.wait_for_function(
        "() => document.querySelector('tr[data-run-id] .sparkline .main-svg') !== null",
        timeout=60_000,
    )
    page.screenshot(path=str(screenshot_dir / "02-runs.png"), full_page=True)

    row.locator("a").first.click()
    page.wait_for_url("**/runs/*/")
    page.wait_for_function(
        "() => { const gd = document.getElementById('timeline');"
        " return gd && gd.data && gd.data.some(t => t.meta.metric === 'step.duration'"
        " && t.x.length > 1); }",
        timeout=90_000,
    )
    first = page.evaluate(COUNT_POINTS, "timeline")
    assert first.get("process.cpu_percent@process", 0) > 0, first
    assert first.get("process.rss@process", 0) > 0, first
    assert first.get("step.duration@rank:0", 0) > 1, first
    assert first.get("step.data_wait@rank:0", 0) > 1, first
    # A CPU host has no GPU rows: one line says so instead of four empty charts.
    assert page.locator(".no-data[data-group=gpu]").count() == 1
    page.screenshot(path=str(screenshot_dir / "03-run-early.png"), full_page=True)

    def grown() -> dict[str, int] | None:
        now = page.evaluate(COUNT_POINTS, "timeline")
        ok = all(
            now.get(key, 0) > first[key]
            for key in ("process.cpu_percent@process", "step.duration@rank:0")
        )
        return now if ok else None

    later = wait_until(grown, timeout_s=60, what="the timeline's points to grow")
    assert sum(later.values()) > sum(first.values())
    page.screenshot(path=str(screenshot_dir / "04-run-later.png"), full_page=True)

    # Zooming asks the server for that range (at full resolution) and keeps the zoom.
    with page.expect_request(lambda r: "/timeline?" in r.url and "start=" in r.url) as zoomed:
        page.evaluate(
            """() => {
              const gd = document.getElementById('timeline');
              const ms = (v) => new Date(v.replace(' ', 'T') + 'Z').getTime();
              const [a, b] = gd.layout.xaxis.range.map(ms);
              return Plotly.relayout(gd, {'xaxis.range[0]': a + (b - a) * 0.25,
                                          'xaxis.range[1]': a + (b - a) * 0.75});
            }"""
        )
    assert "end=" in zoomed.value.url
    range_before = page.evaluate(X_RANGE_MS)
    time.sleep(7)  # at least one live update
    assert page.evaluate(X_RANGE_MS) == pytest.approx(range_before, abs=1)
    page.screenshot(path=str(screenshot_dir / "05-run-zoomed.png"), full_page=True)

    assert not [url for url in failed_requests if "favicon" not in url], failed_requests
    page.close()
