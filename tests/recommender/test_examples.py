"""The planted-bottleneck examples, attached offline and analysed, name their planted cause.

Each example runs under `perf-agent attach --offline DIR` (the real agent, CPU only); then
`python -m perfweb_recommender analyze DIR` must rank the planted cause first, and the healthy
example
must yield no finding with an estimated gain of 10% or more.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PLANTED = {
    "bottleneck_dataloader.py": "dataloader.num_workers",
    "bottleneck_dataparallel.py": "distributed.dataparallel",
    "bottleneck_empty_cache.py": "memory.empty_cache_in_loop",
    "bottleneck_tiny_batch.py": "launch.overhead",
}
HEALTHY_GAIN_MAX = 0.10

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("perf-agent") is None, reason="perf-agent not installed"),
]


def _attach_and_analyse(script: str, offline: Path) -> dict:
    attached = subprocess.run(
        [
            "perf-agent",
            "attach",
            "--offline",
            str(offline),
            "--",
            sys.executable,
            str(EXAMPLES / script),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=240,
    )
    assert attached.returncode == 0, attached.stderr[-2000:]
    analysed = subprocess.run(
        [sys.executable, "-m", "perfweb_recommender", "analyze", str(offline), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert analysed.returncode == 0, analysed.stderr
    return json.loads(analysed.stdout)


@pytest.mark.parametrize("script", sorted(PLANTED))
def test_each_example_names_its_planted_cause_first(script: str, tmp_path: Path) -> None:
    report = _attach_and_analyse(script, tmp_path / "offline")
    ranked = [(f["id"], f["score"]) for f in report["findings"]]
    assert ranked, "no findings"
    assert ranked[0][0] == PLANTED[script], ranked


def test_the_healthy_example_has_no_finding_worth_ten_percent(tmp_path: Path) -> None:
    report = _attach_and_analyse("healthy.py", tmp_path / "offline")
    big = [
        (f["id"], f["estimated_gain"])
        for f in report["findings"]
        if f["estimated_gain"] >= HEALTHY_GAIN_MAX
    ]
    assert big == []
