"""In Chromium, against a real server: an inference job started from the jobs form fills in
its before/after table (latency p50/p99, throughput, peak memory, output agreement) while the
page polls, and a faster fix whose outputs moved says "faster but changes results" in red.

The runner's side is its API, posted as `perf-agent runner` posts it (claim, one progress
post per measured arm with the inference fields, result).
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from perfweb_contract.jobs import FORM_SIZES
from tests.browser.conftest import LiveServer
from tests.browser.pages import logged_in_page

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
HOST = "serving-node-03"
MIB = 2**20
AGREE = {
    "samples": 32,
    "top1_agreement": 1.0,
    "max_abs_diff": 3e-6,
    "mean_abs_diff": 4e-7,
    "max_rel_diff": 2e-5,
    "mismatched": 0,
}
ROWS = """() => [...document.querySelectorAll('[data-testid="before-after"] tbody tr')].map(
  (tr) => ({key: tr.dataset.key, cells: [...tr.cells].map((td) => td.textContent.trim()),
            change: tr.cells[3].className}))"""


def _api(server: LiveServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{server.url}/api/v1/{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200
        return json.loads(reply.read())


def _serving_run(server: LiveServer) -> str:
    """A finished CPU serving run on HOST with a recorded command (what a job runs)."""
    run_id = uuid.uuid4().hex
    t0 = time.time() - 60
    _api(
        server,
        "ingest/start",
        {
            "run_id": run_id,
            "agent_id": run_id,
            "name": "mlp-serving",
            "role": "launcher",
            "command": ["python", "serve.py"],
            "cwd": "/srv",
            "host": HOST,
            "pid": 7,
            "rank": None,
            "local_rank": None,
            "world_size": None,
            "started_at": t0,
            "tags": {},
            "facts": {"torch.version": "2.13.0"},
            "devices": [],
        },
    )
    ends = [t0 + 0.02 * (i + 1) for i in range(50)]
    _api(
        server,
        "ingest/batch",
        {
            "run_id": run_id,
            "agent_id": run_id,
            "seq": 0,
            "sent_at": ends[-1],
            "dropped": 0,
            "metrics": [],
            "devices": [],
            "steps": {
                "rank": 0,
                "index": list(range(50)),
                "t": ends,
                "duration": [0.02] * 50,
                "data_wait": [0.0] * 50,
            },
            "facts": {"workload.kind": "inference", "steps.source": "module"},
        },
    )
    _api(
        server,
        "ingest/finish",
        {"run_id": run_id, "agent_id": run_id, "ended_at": ends[-1], "exit_code": 0, "final": True},
    )
    return run_id


def _latencies(mean: float) -> list[float]:
    return [mean * (0.97 + 0.06 * i / 9) for i in range(10)] + [mean * 1.8]


def _run_the_job(server: LiveServer, *, base_s: float, cand_s: float, outputs: list[dict]) -> int:
    """The runner's posts: claim, baseline and candidate arms of each round, result."""
    job = _api(server, "jobs/claim", {"host": HOST, "runner_id": "browser-runner"})["job"]
    assert job is not None
    claim = {"claim_token": job["claim_token"]}
    for number, summary in enumerate(outputs, start=1):
        for which, mean, rss in (("baseline", base_s, 412), ("candidate", cand_s, 163)):
            # as a runner posts them: every request, the job's warm-up ones first (slower),
            # which the server leaves out (perfweb_contract.ab.decision.settle)
            step_s = [2 * mean] * FORM_SIZES["warmup"] + _latencies(mean)
            arm = {
                "round": number,
                "arm": which,
                "step_s": step_s,
                "loss": None,
                "kind": "inference",
                "batch_sizes": [8] * len(step_s),
                "peak_rss_bytes": rss * MIB,
                "cuda_max_allocated_bytes": None,
                "outputs": summary if which == "candidate" else None,
            }
            _api(server, f"jobs/{job['id']}/progress", {**claim, "arm": arm})
            time.sleep(0.1)
    _api(server, f"jobs/{job['id']}/result", {**claim, "result": {"verdict": "faster"}})
    return int(job["id"])


def test_an_inference_job_page_fills_in_its_before_after_table(
    browser: Any, perfweb_server: LiveServer, screenshot_dir: Path, readme_shots: Path
) -> None:
    run_id = _serving_run(perfweb_server)
    page, errors = logged_in_page(browser, perfweb_server.url, width=1300)
    page.goto(f"{perfweb_server.url}/runs/{run_id}/jobs/")
    form = page.locator('[data-testid="new-job"]')
    form.locator('input[name="knob"]').fill("quantize=dynamic")
    form.locator('input[name="rounds"]').fill("3")
    # exactly 3 rounds: one look at the interval (the runner here posts 3 and its result)
    form.locator('input[name="max_rounds"]').fill("3")
    assert form.locator('input[name="agreement_top1"]').input_value() == "0.99"
    assert form.locator('input[name="agreement_rtol"]').input_value() == "0.01"
    page.screenshot(path=str(screenshot_dir / "new-job-form.png"), full_page=True)
    form.locator('button[type="submit"]').click()
    page.wait_for_url(f"{perfweb_server.url}/jobs/*/")
    job_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    assert page.locator('[data-testid="job-status"]').inner_text() == "queued"
    assert not page.locator('[data-testid="before-after"]').is_visible()

    assert _run_the_job(perfweb_server, base_s=0.02, cand_s=0.01, outputs=[AGREE] * 3) == job_id
    # The page polls every 2 s: the table appears without a reload.
    page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=\"before-after\"] tbody tr').length > 0"
        " && document.querySelector('[data-testid=\"job-status\"]').textContent === 'done'",
        timeout=30_000,
    )
    rows = {row["key"]: row for row in page.evaluate(ROWS)}
    assert list(rows) == [
        "latency_p50_s",
        "latency_p99_s",
        "throughput_rps",
        "throughput_sps",
        "peak_rss_bytes",
        "top1_agreement",
        "max_rel_diff",
    ]
    metric, before, after, change = rows["latency_p50_s"]["cells"]
    assert (metric, before, after) == ("latency p50", "20.1 ms", "10 ms")
    assert change.startswith("-50.") and "better" in rows["latency_p50_s"]["change"]
    assert rows["latency_p99_s"]["cells"][1] == "36 ms"  # the tail request
    assert rows["throughput_sps"]["cells"][0] == "throughput"
    assert rows["throughput_sps"]["cells"][2].endswith("samples/s")
    assert rows["peak_rss_bytes"]["cells"][1:] == ["412.0 MiB", "163.0 MiB", "-60.4%"]
    assert rows["top1_agreement"]["cells"][1:] == ["reference", "100.0%", "within the 99% minimum"]
    summary = page.locator('[data-testid="job-summary"]').inner_text()
    assert summary.startswith("2.0") and summary.endswith(")"), summary
    # the job's state apart from its verdict: it ran to its end (done), and what it found
    assert page.locator('[data-testid="job-verdict"]').inner_text() == "verdict: faster"
    assert page.locator('[data-testid="job-progress"]').inner_text() == "3 rounds measured"
    check = page.locator('[data-testid="results-check"]').inner_text()
    assert check.startswith("Outputs agree over 96 requests"), check
    page.locator("#before-after-panel").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / "inference-job.png"), full_page=True)
    page.locator("#before-after-panel").screenshot(path=str(readme_shots / "job-before-after.png"))
    assert not errors, errors
    page.close()


def test_a_job_whose_fix_changes_the_outputs_says_so(
    browser: Any, perfweb_server: LiveServer, screenshot_dir: Path
) -> None:
    run_id = _serving_run(perfweb_server)
    page, errors = logged_in_page(browser, perfweb_server.url, width=1300)
    page.goto(f"{perfweb_server.url}/runs/{run_id}/jobs/")
    form = page.locator('[data-testid="new-job"]')
    form.locator('input[name="knob"]').fill("quantize=dynamic")
    form.locator('input[name="rounds"]').fill("3")
    form.locator('input[name="max_rounds"]').fill("3")
    form.locator('button[type="submit"]').click()
    page.wait_for_url(f"{perfweb_server.url}/jobs/*/")
    lossy = {**AGREE, "top1_agreement": 0.91, "max_rel_diff": 0.08}
    job_id = _run_the_job(perfweb_server, base_s=0.02, cand_s=0.011, outputs=[lossy] * 3)
    page.goto(f"{perfweb_server.url}/jobs/{job_id}/")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"job-summary\"]').textContent.length > 0"
    )
    assert page.locator('[data-testid="job-status"]').inner_text() == "done"
    verdict = page.locator('[data-testid="job-verdict"]').inner_text()
    assert verdict == "verdict: faster but changes results"
    rows = {row["key"]: row for row in page.evaluate(ROWS)}
    assert rows["top1_agreement"]["cells"][2:] == ["91.0%", "below the 99% minimum"]
    assert "worse" in rows["top1_agreement"]["change"]
    assert rows["max_rel_diff"]["cells"][2:] == ["8.00e-02", "above the 1e-02 tolerance"]
    check = page.locator('[data-testid="results-check"]')
    assert check.inner_text() == (
        "faster but changes results: top-1 agreement 91.0% below the 99% minimum; "
        "max rel. diff 8.00e-02 above the 1e-02 tolerance. Not verified."
    )
    color = check.evaluate("(el) => getComputedStyle(el).color")
    assert color == "rgb(214, 69, 69)", color  # var(--failed)
    page.locator("#before-after-panel").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / "inference-job-changes-results.png"), full_page=True)
    assert not errors, errors
    page.close()
