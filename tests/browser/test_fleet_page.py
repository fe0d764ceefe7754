"""The fleet page in Chromium: a GPU run posted through the ingest API shows up split into
busy and idle-holding-memory hours, with its chart drawn and its top fix's saving."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import LiveServer
from tests.browser.pages import logged_in_page

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]

RUN_ID = "f1ee7" + "0" * 27


def post(server: LiveServer, path: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        f"{server.url}/api/v1/ingest/{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200


def gpu_run(server: LiveServer) -> None:
    """Two minutes of an H100: one busy, one idle while holding 30 GiB."""
    end = time.time() - 5
    start = end - 120
    seconds = [start + i for i in range(120)]
    agent = {"run_id": RUN_ID, "agent_id": RUN_ID[::-1]}
    post(
        server,
        "start",
        {
            **agent,
            "name": "llm-finetune",
            "role": "launcher",
            "command": ["python", "ft.py"],
            "cwd": "/work",
            "host": "gpu-node-3",
            "pid": 1,
            "started_at": start,
            "tags": {"user": "ada"},
            "facts": {},
            "devices": [
                {"key": "gpu:0", "kind": "gpu", "index": 0, "name": "NVIDIA H100 80GB HBM3"}
            ],
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
                {
                    "device": "gpu:0",
                    "name": "gpu.utilization",
                    "t": seconds,
                    "v": [95.0] * 60 + [0.0] * 60,
                },
                {
                    "device": "gpu:0",
                    "name": "gpu.memory_used",
                    "t": seconds,
                    "v": [30 * 2.0**30] * 120,
                },
            ],
        },
    )
    post(server, "finish", {**agent, "ended_at": end, "exit_code": 0, "final": True})


def test_the_fleet_page_draws_where_the_gpu_hours_went(
    browser: Any, perfweb_server: LiveServer, screenshot_dir: Path
) -> None:
    gpu_run(perfweb_server)
    page, errors = logged_in_page(browser, perfweb_server.url, height=1000)
    page.click("nav >> text=Fleet")
    page.wait_for_url("**/fleet/")
    page.click("text=Day")
    page.wait_for_function("() => document.querySelector('#waste-chart .main-svg') !== null")
    row = page.locator("[data-testid=waste-runs] tr", has_text="llm-finetune")
    assert "1 × NVIDIA H100 80GB HBM3" in row.inner_text()
    assert page.get_by_test_id("idle-hours").inner_text() == "0.02 h"  # 60 s of 3600
    host = page.locator("[data-testid=waste-hosts] tr", has_text="gpu-node-3").inner_text()
    assert "0.02 h" in host.split("\t")[3]  # low + idle: the idle minute
    bars = page.evaluate(
        "() => document.getElementById('waste-chart').data.map(t => [t.name, t.x[0]])"
    )
    by_name = dict(bars)
    assert by_name["busy"] == pytest.approx(60 / 3600, rel=0.02)
    assert by_name["idle holding memory"] == pytest.approx(60 / 3600, rel=0.02)
    page.screenshot(path=str(screenshot_dir / "fleet.png"), full_page=True)
    assert errors == []
