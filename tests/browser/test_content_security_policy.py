"""The dashboard's Content-Security-Policy in Chromium (issue 27): every main page carries
it, no script of ours is refused by it (no inline script, no inline handler, no eval, the
Plotly bundle from this origin), and the pages still work: the runs list, a run's timeline,
the comparison's charts, the fleet page's project filter, the alerts and jobs pages."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from perfweb.dashboard.csp import POLICY
from tests.browser.conftest import LiveServer
from tests.browser.pages import csp_violations, logged_in_page

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
RUNS = ("c5b0" + "1" * 28, "c5b0" + "2" * 28)


def post(server: LiveServer, path: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        f"{server.url}/api/v1/ingest/{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200


def a_finished_run(server: LiveServer, run_id: str, *, step_s: float) -> None:
    """A minute of a CPU training run: process samples and 60 steps."""
    end = time.time() - 5
    seconds = [end - 60 + i for i in range(60)]
    agent = {"run_id": run_id, "agent_id": run_id[::-1]}
    post(
        server,
        "start",
        {
            **agent,
            "name": f"csp-{run_id[-4:]}",
            "role": "launcher",
            "command": ["python", "t.py"],
            "cwd": "/work",
            "host": "cpu-node",
            "pid": 1,
            "started_at": seconds[0],
            "tags": {},
            "facts": {"workload.kind": "training"},
            "devices": [],
        },
    )
    post(
        server,
        "batch",
        {
            **agent,
            "seq": 0,
            "sent_at": end,
            "facts": {},
            "devices": [],
            "dropped": 0,
            "metrics": [
                {"device": "process", "name": "process.cpu_percent", "t": seconds, "v": [90.0] * 60}
            ],
            "steps": {
                "rank": 0,
                "index": list(range(60)),
                "t": seconds,
                "duration": [step_s] * 60,
                "data_wait": [step_s / 2] * 60,
            },
        },
    )
    post(server, "finish", {**agent, "ended_at": end, "exit_code": 0, "final": True})


def test_every_main_page_has_the_policy_and_nothing_is_refused(
    browser: Any, perfweb_server: LiveServer
) -> None:
    for run_id, step_s in zip(RUNS, (0.1, 0.12), strict=True):
        a_finished_run(perfweb_server, run_id, step_s=step_s)
    page, errors = logged_in_page(browser, perfweb_server.url)
    url = perfweb_server.url
    pages = {
        "/": "() => document.querySelector('[data-testid=runs-table] tbody tr') !== null",
        f"/runs/{RUNS[0]}/": "() => document.querySelector('#timeline .main-svg') !== null",
        f"/compare/?run={RUNS[0]}&run={RUNS[1]}": "() => document.querySelector('.main-svg')",
        "/fleet/": "() => document.querySelector('select[name=project]') !== null",
        "/alerts/": "() => document.body.innerText.length > 0",
        f"/runs/{RUNS[0]}/jobs/": "() => document.querySelector('form') !== null",
    }
    for path, works in pages.items():
        reply = page.goto(url + path)
        assert reply.status == 200, path
        assert reply.headers["content-security-policy"] == POLICY, path
        page.wait_for_function(works, timeout=30_000)
        page.wait_for_load_state("networkidle")
        assert csp_violations(page) == [], path
    page.goto(f"{url}/fleet/")  # the filter that was an inline onchange handler
    with page.expect_navigation():
        page.select_option("select[name=project]", "demo")
    assert "project=demo" in page.url
    assert errors == []
