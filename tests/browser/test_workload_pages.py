"""In Chromium, against a real server: an inference run's page draws latency percentiles and
throughput (and no step-time row pretending it is training); a run the agent could not see
says so, with the fix, and never "No finding".

The runs are posted to the server's ingest API with the agreed names (`workload.kind`,
`steps.source`, `step.batch_size`), as the agent sends them.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.browser.conftest import LiveServer
from tests.browser.pages import logged_in_page

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]

CHART_TRACES = """(id) => {
  const gd = document.getElementById(id);
  if (!gd || !gd.data) return null;
  return gd.data.map((t) => ({name: t.name, points: t.y.filter(Number.isFinite).length}));
}"""


def _post(server: LiveServer, path: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        f"{server.url}/api/v1/ingest/{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200


def _start(server: LiveServer, run_id: str, name: str, t0: float) -> None:
    _post(
        server,
        "start",
        {
            "run_id": run_id,
            "agent_id": run_id,
            "name": name,
            "role": "launcher",
            "command": ["python", "serve.py"],
            "cwd": "/srv",
            "host": "infer-01",
            "pid": 77,
            "rank": None,
            "local_rank": None,
            "world_size": None,
            "started_at": t0,
            "tags": {},
            "facts": {"torch.version": "2.13.0"},
            "devices": [],
        },
    )


def _finish(server: LiveServer, run_id: str, ended: float) -> None:
    _post(
        server,
        "finish",
        {"run_id": run_id, "agent_id": run_id, "ended_at": ended, "exit_code": 0, "final": True},
    )


def _inference_run(server: LiveServer) -> str:
    """400 requests over ~18 s: 300 at ~20 ms, 4 s without any, then 100 at 30–90 ms."""
    run_id = uuid.uuid4().hex
    t0 = time.time() - 120
    _start(server, run_id, "resnet-serving", t0)
    rng = np.random.default_rng(3)
    latencies = np.concatenate([rng.uniform(0.015, 0.025, 300), rng.uniform(0.03, 0.09, 100)])
    gaps = np.full(len(latencies), 0.005)
    gaps[300] = 4.0  # no request for 4 s between the two phases
    ends = (t0 + np.cumsum(latencies + gaps)).tolist()
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
                {"device": "rank:0", "name": "step.batch_size", "t": ends, "v": [4.0] * len(ends)},
                {
                    "device": "process",
                    "name": "process.rss",
                    "t": ends[::10],
                    "v": [6e8 + 1e6 * i for i in range(len(ends[::10]))],
                },
                {
                    "device": "process",
                    "name": "process.cpu_percent",
                    "t": ends[::10],
                    "v": [90.0] * len(ends[::10]),
                },
                {
                    "device": "host",
                    "name": "host.cpu_percent",
                    "t": ends[::10],
                    "v": [70.0] * len(ends[::10]),
                },
            ],
            "steps": {
                "rank": 0,
                "index": list(range(len(ends))),
                "t": ends,
                "duration": latencies.tolist(),
                "data_wait": [0.0] * len(ends),
            },
            "facts": {"workload.kind": "inference", "steps.source": "module"},
            "devices": [],
        },
    )
    _finish(server, run_id, ends[-1] + 1)
    return run_id


def _unseen_run(server: LiveServer) -> str:
    """word_language_model as the agent saw it: torch, process samples, no step, no GPU."""
    run_id = uuid.uuid4().hex
    t0 = time.time() - 60
    _start(server, run_id, "word-language-model", t0)
    ts = [t0 + i for i in range(30)]
    _post(
        server,
        "batch",
        {
            "run_id": run_id,
            "agent_id": run_id,
            "seq": 0,
            "sent_at": ts[-1],
            "dropped": 0,
            "metrics": [
                {"device": "process", "name": "process.cpu_percent", "t": ts, "v": [100.0] * 30}
            ],
            "facts": {},
            "devices": [],
        },
    )
    _finish(server, run_id, ts[-1] + 1)
    return run_id


def test_an_inference_runs_page_draws_latency_percentiles_and_throughput(
    browser: Any, perfweb_server: LiveServer, screenshot_dir: Path
) -> None:
    run_id = _inference_run(perfweb_server)
    page, errors = logged_in_page(browser, perfweb_server.url, failed_requests=True)
    page.goto(f"{perfweb_server.url}/runs/{run_id}/")
    page.wait_for_function(
        "() => ['latency-chart', 'throughput-chart'].every((id) =>"
        " (document.getElementById(id).data || []).length > 0)",
        timeout=60_000,
    )
    page.wait_for_function("() => document.getElementById('timeline').dataset.rows", timeout=60_000)
    latency = page.evaluate(CHART_TRACES, "latency-chart")
    throughput = page.evaluate(CHART_TRACES, "throughput-chart")
    assert [t["name"] for t in latency] == ["latency p50", "latency p95", "latency p99"]
    assert all(t["points"] >= 10 for t in latency), latency
    assert [t["name"] for t in throughput] == ["requests/s", "samples/s"]
    assert all(t["points"] >= 10 for t in throughput), throughput
    p99 = page.evaluate("() => document.getElementById('latency-chart').data[2].y")
    assert max(p99[-4:]) > 2 * max(p99[:4])  # the slowdown shows where it happened
    assert None in p99  # the silent 4 s break the latency lines ...
    rps = page.evaluate("() => document.getElementById('throughput-chart').data[0].y")
    assert 0 in rps  # ... and drop the throughput to 0
    # No step-time row: the timeline charts the process and the host.
    rows = page.locator("#timeline").get_attribute("data-rows") or ""
    assert "steps" not in rows.split(","), rows
    assert "host_cpu" in rows.split(","), rows  # host-wide CPU beside the process's own
    assert "Step time" not in page.locator("#timeline-panel").inner_text()
    assert page.locator('[data-testid="workload-kind"]').inner_text() == "inference"
    numbers = page.locator('[aria-label="Request statistics"]').inner_text()
    assert "Latency p50" in numbers and "p99" in numbers and "requests/s" in numbers
    page.locator("#requests-panel").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / "inference-run.png"), full_page=True)
    assert not [e for e in errors if "favicon" not in e], errors
    page.close()


def test_an_unseen_runs_page_says_it_was_not_examined(
    browser: Any, perfweb_server: LiveServer, screenshot_dir: Path
) -> None:
    run_id = _unseen_run(perfweb_server)
    page, errors = logged_in_page(browser, perfweb_server.url, failed_requests=True)
    page.goto(f"{perfweb_server.url}/runs/{run_id}/")
    statement = page.locator('[data-testid="coverage-statement"]')
    statement.wait_for(timeout=30_000)
    text = statement.inner_text()
    assert "Not examined, so not healthy either" in text
    assert "no optimizer step, no backward pass, no nn.Module call" in text
    assert page.locator("code.coverage-fix").inner_text() == "perfweb_agent.step()"
    assert statement.is_visible()
    page.wait_for_function("() => !document.getElementById('timeline-loading')", timeout=60_000)
    assert "No finding" not in page.locator("body").inner_text()
    page.screenshot(path=str(screenshot_dir / "unseen-run.png"), full_page=True)
    assert not [e for e in errors if "favicon" not in e], errors
    page.close()


def test_a_live_run_is_laid_out_again_once_the_agent_labels_it_inference(
    browser: Any, perfweb_server: LiveServer, screenshot_dir: Path
) -> None:
    run_id = uuid.uuid4().hex
    t0 = time.time() - 30
    _start(perfweb_server, run_id, "live-serving", t0)
    page, errors = logged_in_page(browser, perfweb_server.url, failed_requests=True)
    page.goto(f"{perfweb_server.url}/runs/{run_id}/")
    assert page.locator('[data-testid="workload-kind"]').inner_text() == "not seen yet"
    assert page.locator("#requests-panel").count() == 0
    ends = [t0 + 0.05 * (i + 1) for i in range(60)]
    _post(
        perfweb_server,
        "batch",
        {
            "run_id": run_id,
            "agent_id": run_id,
            "seq": 0,
            "sent_at": ends[-1],
            "dropped": 0,
            "metrics": [
                {"device": "rank:0", "name": "step.batch_size", "t": ends, "v": [2.0] * 60}
            ],
            "steps": {
                "rank": 0,
                "index": list(range(60)),
                "t": ends,
                "duration": [0.04] * 60,
                "data_wait": [0.0] * 60,
            },
            "facts": {"workload.kind": "inference", "steps.source": "module"},
            "devices": [],
        },
    )
    page.locator("#requests-panel").wait_for(timeout=30_000)  # the page reloaded itself
    assert page.locator('[data-testid="workload-kind"]').inner_text() == "inference"
    page.wait_for_function(
        "() => (document.getElementById('latency-chart').data || []).length === 3",
        timeout=30_000,
    )
    rows = page.evaluate(
        "() => JSON.parse(document.getElementById('page-config').textContent).rows.map(r => r.key)"
    )
    assert "steps" not in rows and "cpu" in rows, rows  # laid out for inference now
    page.screenshot(path=str(screenshot_dir / "live-inference-run.png"), full_page=True)
    assert not [e for e in errors if "favicon" not in e], errors
    page.close()
    _finish(perfweb_server, run_id, ends[-1] + 1)


def test_a_live_training_run_is_labelled_in_place_without_a_reload(
    browser: Any, perfweb_server: LiveServer
) -> None:
    run_id = uuid.uuid4().hex
    t0 = time.time() - 30
    _start(perfweb_server, run_id, "live-training", t0)
    page, errors = logged_in_page(browser, perfweb_server.url, failed_requests=True)
    page.goto(f"{perfweb_server.url}/runs/{run_id}/")
    page.evaluate("() => { window.sameDocument = true; }")
    ends = [t0 + 0.5 * (i + 1) for i in range(20)]
    _post(
        perfweb_server,
        "batch",
        {
            "run_id": run_id,
            "agent_id": run_id,
            "seq": 0,
            "sent_at": ends[-1],
            "dropped": 0,
            "metrics": [],
            "steps": {
                "rank": 0,
                "index": list(range(20)),
                "t": ends,
                "duration": [0.5] * 20,
                "data_wait": [0.1] * 20,
            },
            "facts": {"workload.kind": "training", "steps.source": "backward"},
            "devices": [],
        },
    )
    page.wait_for_function(
        "() => document.querySelector('[data-testid=workload-kind]').textContent === 'training'",
        timeout=30_000,
    )
    assert page.evaluate("() => window.sameDocument === true")  # labelled in place
    assert page.locator("#requests-panel").count() == 0
    assert not [e for e in errors if "favicon" not in e], errors
    page.close()
    _finish(perfweb_server, run_id, ends[-1] + 1)
