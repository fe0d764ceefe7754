"""In Chromium, against a real server: a real training script's `perfweb_agent.log` scalars are
stored, come back from the read API, and are drawn as rows of the run's timeline, aligned
with the others on one time axis, with its `perfweb_agent.phase` phases shaded across every row."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import ROOT, LiveServer
from tests.browser.pages import logged_in_page

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]

TRAINING_WITH_SCALARS = """
import math, sys, time
import torch
from torch import nn
import perfweb_agent

run = perfweb_agent.attach(server=sys.argv[1], token=sys.argv[2], name="scalars-demo",
                   interval=0.2, flush_interval=0.5)
print(run.settings.run_id)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 16), torch.randn(64, 1)
tokens = 0
for epoch in range(2):
    perfweb_agent.phase("train")
    for step in range(15):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        tokens += 64 * 16
        perfweb_agent.log(loss=loss, tokens=tokens)
        time.sleep(0.06)
    perfweb_agent.phase("eval")
    with torch.no_grad():
        for _ in range(8):
            eval_loss = nn.functional.mse_loss(model(x), y)
            time.sleep(0.06)
    perfweb_agent.log(eval_loss=eval_loss.item())
perfweb_agent.phase("none")
perfweb_agent.shutdown()
"""

TIMELINE = """() => {
  const gd = document.getElementById('timeline');
  return {rows: gd.dataset.rows, phases: gd.dataset.phases,
          axes: Array.from(new Set(gd.data.map((t) => t.xaxis))),
          shapes: (gd.layout.shapes || []).length,
          titles: gd.layout.annotations.map((a) => a.text)};
}"""


def _get(server: LiveServer, path: str) -> Any:
    request = urllib.request.Request(
        f"{server.url}{path}", headers={"Authorization": f"Bearer {server.token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


@pytest.fixture(scope="module")
def scalars_run(perfweb_server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    script = tmp_path_factory.mktemp("scalars") / "train.py"
    script.write_text(TRAINING_WITH_SCALARS)
    done = subprocess.run(
        [sys.executable, str(script), perfweb_server.url, perfweb_server.token],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[0]


def test_logged_scalars_are_stored_and_read_back_from_the_api(
    perfweb_server: LiveServer, scalars_run: str
) -> None:
    run = _get(perfweb_server, f"/api/v1/runs/{scalars_run}")
    assert run["steps"] == 30 and run["name"] == "scalars-demo"
    listed = {(s["device"], s["name"]): s["count"] for s in run["series"]}
    assert listed[("rank:0", "scalar.loss")] == 30
    assert listed[("rank:0", "scalar.tokens")] == 30
    assert listed[("rank:0", "scalar.eval_loss")] == 2
    assert listed[("rank:0", "run.phase")] == 5
    got = _get(perfweb_server, f"/api/v1/runs/{scalars_run}/series?name=scalar.tokens")
    (tokens,) = got["series"]
    assert tokens["v"] == [1024.0 * (i + 1) for i in range(30)]
    (phase,) = _get(perfweb_server, f"/api/v1/runs/{scalars_run}/series?name=run.phase")["series"]
    assert phase["v"] == [1.0, 2.0, 1.0, 2.0, 0.0]


def test_the_timeline_draws_a_row_per_scalar_and_shades_the_phases(
    browser: Any, perfweb_server: LiveServer, scalars_run: str, screenshot_dir: Path
) -> None:
    page, errors = logged_in_page(browser, perfweb_server.url, failed_requests=True)
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}"))
    page.goto(f"{perfweb_server.url}/runs/{scalars_run}/")
    try:
        page.wait_for_function(
            "() => document.getElementById('timeline').dataset.rows", timeout=60_000
        )
    finally:
        assert not errors, errors
    drawn = page.evaluate(TIMELINE)
    rows = drawn["rows"].split(",")
    assert rows[-3:] == ["scalar:scalar.eval_loss", "scalar:scalar.loss", "scalar:scalar.tokens"]
    assert "steps" in rows and "cpu" in rows
    assert drawn["axes"] == ["x"]  # every row on the one shared time axis
    assert drawn["phases"] == "train,eval,train,eval"
    assert drawn["shapes"] == 4
    assert {"<b>loss</b>", "<b>tokens</b>", "<b>eval_loss</b>"} <= set(drawn["titles"])
    legend = page.locator('[data-testid="phase-legend"]').inner_text()
    assert legend.startswith("Phases:") and "train (2×" in legend and "eval (2×" in legend
    page.locator("#timeline-panel").screenshot(path=str(screenshot_dir / "script-scalars.png"))
    assert not [e for e in errors if "favicon" not in e], errors
    page.close()
