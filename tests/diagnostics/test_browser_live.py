"""In Chromium: the ranked fixes panel of a run whose diagnosis lags behind its data picks up
the new diagnosis by itself (findings.js polls the findings API, swaps in the new panel)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.jobs import stack as stack_module
from tests.server.servers import require_redis

REDIS_DB = 11  # alerts use 12, jobs 13, the server tests 14


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[stack_module.Stack]:
    """Server and worker, no beat: nothing diagnoses the run after it ends unless asked."""
    require_redis()
    monkeypatch.setattr(stack_module, "REDIS_DB", REDIS_DB)
    running = stack_module.Stack()
    try:
        yield running.start()
    finally:
        running.stop()


@pytest.mark.browser
@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_panel_shows_a_new_diagnosis_without_a_reload(
    stack: stack_module.Stack, browser: Any
) -> None:
    run_id = stack.attach(sys.executable, "examples/bottleneck_dataloader.py", "--steps", "30")
    [(run_pk,)] = stack.query("SELECT id FROM runs_run WHERE run_id = ?", run_id)
    page = browser.new_page()
    try:
        page.goto(stack.url + "/login/")
        page.fill("input[name=username]", stack_module.USER)
        page.fill("input[name=password]", stack_module.PASSWORD)
        page.click("button[type=submit]")
        page.goto(f"{stack.url}/runs/{run_id}/")
        panel = page.locator("#findings-panel")
        assert panel.get_attribute("data-live") == "true"
        before = panel.get_attribute("data-diagnosed-at")
        stack.send_task("perfweb.diagnostics.tasks.diagnose_run_task", run_pk)
        page.wait_for_function(
            "before => document.getElementById('findings-panel').dataset.diagnosedAt !== before",
            arg=before,
            timeout=60_000,
        )
        first = page.locator("#findings-panel li.finding").first
        assert first.get_attribute("data-finding") == "dataloader.num_workers"
        assert page.locator("#findings-panel").get_attribute("data-live") == "false"
    finally:
        page.close()
