"""In Chromium, on a real stack (web + Celery worker) with two real agent-attached CPU runs
that differ in one setting (DataLoader workers 0 vs 2): the comparison page names the fact
that differs and draws both runs; the run page shows the trace tables; the trace downloads
as a file the recommender loads back; "Open in Perfetto" hands the trace to the Perfetto
window (a stand-in page served for ui.perfetto.dev, which this machine cannot reach)."""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perfweb_contract.protocol import STEP_PHASES
from perfweb_recommender.analysis.trace_tables import trace_tables
from perfweb_recommender.trace.loader import load_trace
from tests.browser.pages import log_in
from tests.jobs import stack as stack_module
from tests.server.servers import require_redis

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(600)]
REDIS_DB = 10  # diagnostics use 11, alerts 12, jobs 13, the server tests 14

FAKE_PERFETTO = """<!doctype html><title>Perfetto stand-in</title><script>
window.addEventListener("message", function (e) {
  if (e.data === "PING") { e.source.postMessage("PONG", e.origin); return; }
  if (e.data && e.data.perfetto) {
    var p = e.data.perfetto, bytes = new Uint8Array(p.buffer);
    window.received = {from: e.origin, title: p.title, fileName: p.fileName,
                       bytes: bytes.length, text: new TextDecoder().decode(bytes)};
  }
});</script>"""


@pytest.fixture(scope="module")
def stack() -> Iterator[stack_module.Stack]:
    require_redis()
    saved, stack_module.REDIS_DB = stack_module.REDIS_DB, REDIS_DB
    running = stack_module.Stack()
    try:
        yield running.start()
    finally:
        running.stop()
        stack_module.REDIS_DB = saved


@pytest.fixture(scope="module")
def two_runs(stack: stack_module.Stack) -> tuple[str, str]:
    """The same script twice, DataLoader workers 0 then 2, each with a profiler window."""
    runs = []
    for workers in ("0", "2"):
        run_id = stack.attach(
            sys.executable,
            "examples/demo_train.py",
            "--steps",
            "60",
            "--workers",
            workers,
            "--item-delay",
            "0.0003",
        )
        stack.wait_row(
            "SELECT t.id FROM diagnostics_trace t JOIN runs_run r ON r.id = t.run_id"
            " WHERE r.run_id = ? AND t.summary LIKE '%\"tables\"%'",
            run_id,
            deadline_s=180,
        )
        runs.append(run_id)
    return runs[0], runs[1]


def _login(page: Any, stack: stack_module.Stack) -> None:
    log_in(page, stack.url, user=stack_module.USER, password=stack_module.PASSWORD)


def test_the_comparison_page_names_the_setting_that_differs(
    stack: stack_module.Stack,
    two_runs: tuple[str, str],
    browser: Any,
    screenshot_dir: Path,
    readme_shots: Path,
) -> None:
    first, second = two_runs
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        _login(page, stack)
        for run_id in (second, first):
            page.locator(f"tr[data-run-id='{run_id}'] input[name=run]").check()
        page.click("[data-testid=compare-button]")
        page.wait_for_url("**/compare/?run=*")
        fact = page.locator("[data-testid=facts-diff] tr[data-fact='dataloader.0.num_workers']")
        assert fact.locator("td").nth(1).inner_text() == "0"  # A: the earlier run
        assert fact.locator("td").nth(2).inner_text() == "2"
        sentence = page.locator("[data-testid=compare-sentence]").inner_text()
        assert "median step" in sentence and first[:8] in sentence and second[:8] in sentence
        page.wait_for_function(
            "() => document.getElementById('step-distribution').dataset.runs === '2'"
            " && document.getElementById('step-bands').dataset.runs === '2'"
            " && Number(document.getElementById('metric-overlays').dataset.charts) >= 1",
            timeout=60_000,
        )
        bands = page.evaluate(
            "() => document.getElementById('step-bands').data.filter(t => t.meta === 'median')"
            ".map(t => t.y.length)"
        )
        assert len(bands) == 2 and all(n > 1 for n in bands)
        raw_shown = (
            "() => document.getElementById('step-bands').data.filter(t => t.meta === 'raw')"
            ".map(t => t.visible)"
        )
        assert page.evaluate(raw_shown) == [False, False]  # the bands alone, zoomed out
        page.screenshot(path=str(readme_shots / "compare-page.png"))  # the README's, unzoomed
        page.evaluate(
            "() => Plotly.relayout('step-bands', {'xaxis.range[0]': 10, 'xaxis.range[1]': 14})"
        )
        page.wait_for_function(
            "() => document.getElementById('step-bands').data.filter(t => t.meta === 'raw')"
            ".every(t => t.visible === true)",
            timeout=10_000,
        )  # zoomed in on a few seconds: each step drawn too
        assert page.locator("[data-testid=trace-diff] tr[data-op]").count() > 0
        page.screenshot(path=str(screenshot_dir / "compare-page.png"), full_page=True)
        assert not errors, errors
    finally:
        page.close()


def test_the_step_anatomy_is_stacked_on_the_run_page_and_diffed_on_the_compare_page(
    stack: stack_module.Stack, two_runs: tuple[str, str], browser: Any, screenshot_dir: Path
) -> None:
    first, second = two_runs
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        _login(page, stack)
        page.goto(f"{stack.url}/runs/{first}/")
        split = page.locator("[data-testid=step-anatomy] [data-phase]")
        phases = [split.nth(i).get_attribute("data-phase") for i in range(split.count())]
        # phases under 0.5% of the step (the optimizer of this small MLP) are left out
        assert {"forward", "backward"} <= set(phases) <= set(STEP_PHASES), phases
        assert page.locator("[data-testid=mfu]").inner_text().strip()  # a share, or why not
        page.wait_for_function(
            "() => { const gd = document.getElementById('timeline'); return gd && gd.data &&"
            " gd.data.filter(t => t.stackgroup === 'anatomy').length >= 4; }",
            timeout=60_000,
        )
        stacked = page.evaluate(
            "() => document.getElementById('timeline').data.filter(t => t.stackgroup ==="
            " 'anatomy').map(t => [t.meta.metric, t.meta.raw, t.y.length])"
        )
        assert all(raw is False and points > 1 for _, raw, points in stacked), stacked
        page.locator("[data-testid=step-anatomy]").scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / "run-page-anatomy.png"), full_page=True)
        page.goto(f"{stack.url}/compare/?run={first}&run={second}")
        sentence = page.locator("[data-testid=phase-diff-sentence]").inner_text()
        assert "step is" in sentence and ("slower" in sentence or "faster" in sentence), sentence
        assert page.locator("[data-testid=phase-diff] tr[data-phase]").count() >= 4
        page.locator("[data-testid=phase-diff]").scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / "compare-page-anatomy.png"), full_page=True)
        assert not errors, errors
    finally:
        page.close()


def test_the_run_page_shows_the_trace_tables_and_downloads_the_trace(
    stack: stack_module.Stack, two_runs: tuple[str, str], browser: Any, screenshot_dir: Path,
    tmp_path: Path, readme_shots: Path,
) -> None:  # fmt: skip
    run_id = two_runs[0]
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    try:
        _login(page, stack)
        page.goto(f"{stack.url}/runs/{run_id}/")
        operators = page.locator("#traces-panel [data-testid=top-operators] tbody tr")
        assert operators.count() >= 3
        names = operators.locator("td.mono").all_inner_texts()
        assert any(name.startswith("aten::") for name in names), names
        # a CPU run: DataLoader, CPU execution, other and the step (no rows of 0.000 GPU time)
        assert page.locator("#traces-panel [data-testid=step-breakdown] tbody tr").count() == 4
        page.wait_for_function(
            "() => { const gd = document.getElementById('timeline'); return gd && gd.data &&"
            " gd.data.some(t => t.meta.metric === 'step.duration.median'); }",
            timeout=60_000,
        )
        page.locator("#traces-panel").scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / "run-page-traces.png"), full_page=True)
        page.evaluate("() => window.scrollTo(0, 0)")
        page.screenshot(path=str(readme_shots / "run-page.png"), full_page=True)  # the README's
        with page.expect_download() as download_info:
            page.locator("#traces-panel [data-action=download]").first.click()
        saved = tmp_path / download_info.value.suggested_filename
        download_info.value.save_as(saved)
        assert saved.name.startswith(run_id) and saved.name.endswith(".pt.trace.json.gz")
        loaded = load_trace(saved)
        assert loaded.steps  # the recommender reads the downloaded window back
        assert trace_tables(saved)["operators"]
    finally:
        page.close()


def test_open_in_perfetto_hands_the_trace_to_the_perfetto_window(
    stack: stack_module.Stack, two_runs: tuple[str, str], browser: Any
) -> None:
    run_id = two_runs[0]
    context = browser.new_context()
    context.route(
        "https://ui.perfetto.dev/**",
        lambda route: route.fulfill(status=200, content_type="text/html", body=FAKE_PERFETTO),
    )
    page = context.new_page()
    try:
        _login(page, stack)
        page.goto(f"{stack.url}/runs/{run_id}/")
        button = page.locator("#traces-panel [data-action=perfetto]").first
        with page.expect_popup() as popup_info:
            button.click()
        popup = popup_info.value
        try:
            popup.wait_for_function("() => window.received !== undefined", timeout=30_000)
        except Exception as error:
            status = page.locator("[data-perfetto-status]").first.inner_text()
            raise AssertionError(
                f"Perfetto got nothing; the page says {status!r}, {popup.url}"
            ) from error
        received = popup.evaluate("() => window.received")
        assert received["from"] == stack.url  # from the dashboard's page, nowhere else
        assert received["title"] == button.get_attribute("data-title")
        document = json.loads(received["text"])  # gunzipped in the browser
        stored = page.request.get(stack.url + button.get_attribute("data-url")).body()
        assert document == json.loads(gzip.decompress(stored))  # the very trace, whole
        assert received["fileName"].endswith(".pt.trace.json")
        page.wait_for_function(
            "() => document.querySelector('[data-perfetto-status]').textContent"
            " === 'opened in Perfetto'",
            timeout=10_000,
        )
    finally:
        context.close()
