"""In Chromium, against a real server: a run on a busy host shows `cpu.host_contention` in its
own "Host conditions" section, and the workload's own fix first in the ranked list.

The run is posted to the ingest API with the names the agent sends, then diagnosed by the
server's own task (`manage.py shell`: the browser tests' server runs no Celery worker).
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import ROOT, LiveServer, manage_command
from tests.browser.pages import logged_in_page
from tests.browser.test_workload_pages import _finish, _post, _start

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]


def _contended_training_run(server: LiveServer) -> str:
    """60 steps waiting 60% on the DataLoader while other processes keep both cores busy."""
    run_id = uuid.uuid4().hex
    t0 = time.time() - 60
    _start(server, run_id, "input-bound-on-a-busy-host", t0)
    ends = [t0 + 0.1 * (i + 1) for i in range(60)]
    _post(
        server,
        "batch",
        {
            "run_id": run_id,
            "agent_id": run_id,
            "seq": 0,
            "sent_at": ends[-1],
            "dropped": 0,
            "metrics": [
                {"device": "host", "name": "host.cpu_percent", "t": ends, "v": [100.0] * 60},
                {"device": "process", "name": "process.cpu_percent", "t": ends, "v": [40.0] * 60},
            ],
            "steps": {
                "rank": 0,
                "index": list(range(60)),
                "t": ends,
                "duration": [0.1] * 60,
                "data_wait": [0.06] * 60,
            },
            "facts": {
                "workload.kind": "training",
                "steps.source": "optimizer",
                "host.cpu_count": 2,
                "host.usable_cores": 2,
                "threads.intra_op": 2,
                "dataloader.0.num_workers": 0,
                "dataloader.0.batch_size": 16,
            },
            "devices": [],
        },
    )
    _finish(server, run_id, ends[-1] + 1)
    return run_id


def _diagnose(server_env: dict[str, str], run_id: str) -> None:
    code = (
        "from perfweb.runs.models import Run;"
        "from perfweb.diagnostics.tasks import diagnose_run_task;"
        f"diagnose_run_task(Run.objects.get(run_id='{run_id}').id)"
    )
    manage_command([sys.executable, str(ROOT / "manage.py")], ["shell", "-c", code], env=server_env)


def test_host_conditions_have_their_own_section_on_the_run_page(
    browser: Any, perfweb_server: LiveServer, server_env: dict[str, str], screenshot_dir: Path
) -> None:
    run_id = _contended_training_run(perfweb_server)
    _diagnose(server_env, run_id)
    page, errors = logged_in_page(browser, perfweb_server.url, failed_requests=True)
    page.goto(f"{perfweb_server.url}/runs/{run_id}/")
    section = page.locator('[data-testid="host-conditions"]')
    section.wait_for(timeout=30_000)
    assert section.is_visible()
    assert section.locator("[data-host-condition]").evaluate_all(
        "items => items.map((item) => item.dataset.hostCondition)"
    ) == ["cpu.host_contention"]
    assert "Host conditions" in section.inner_text()
    ranked = page.locator("#findings-panel ol.findings > li.finding")
    assert ranked.first.get_attribute("data-finding") == "dataloader.num_workers"
    ids = ranked.evaluate_all("items => items.map((item) => item.dataset.finding)")
    assert "cpu.host_contention" not in ids, ids
    # The section comes after the ranked list on the page.
    assert page.evaluate(
        "() => !!(document.querySelector('#findings-panel ol.findings')"
        ".compareDocumentPosition(document.querySelector('[data-testid=host-conditions]'))"
        " & Node.DOCUMENT_POSITION_FOLLOWING)"
    )
    section.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / "host-conditions.png"), full_page=True)
    assert not [e for e in errors if "favicon" not in e], errors
    page.close()
