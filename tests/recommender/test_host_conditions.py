"""Host conditions (risk `system`: cpu.host_contention, gpu.throttling, ...) are shown in their
own section of the text report and of the JSON, and never ranked among the workload's fixes:
on a shared machine the contention finding used to be #1 and push the planted cause to #2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from perfweb_recommender.api import analyze_path
from perfweb_recommender.rules.base import Finding, Fix, rank_findings, split_findings
from perfweb_recommender.text_report import HOST_CONDITIONS_HEADING, render_text
from tests.recommender.offline_runs import inference_batch, write_agent

ROOT = Path(__file__).resolve().parents[2]


def _input_bound_on_a_busy_host() -> dict[str, Any]:
    """60 training steps, each waiting 60% on the DataLoader, while other processes keep both
    cores of the host busy and the job gets 0.4 of the 2 cores its threads ask for."""
    batch = inference_batch([0.1] * 60, batch_size=16)
    ends = batch["steps"]["t"]
    batch["steps"]["data_wait"] = [0.06] * 60
    batch["facts"] = {
        "workload.kind": "training",
        "steps.source": "optimizer",
        "torch.version": "2.13.0",
        "host.cpu_count": 2,
        "host.usable_cores": 2,
        "threads.intra_op": 2,
        "dataloader.0.num_workers": 0,
        "dataloader.0.batch_size": 16,
    }
    batch["metrics"] += [
        {"device": "host", "name": "host.cpu_percent", "t": ends, "v": [100.0] * 60},
        {"device": "process", "name": "process.cpu_percent", "t": ends, "v": [40.0] * 60},
    ]
    return batch


def test_it_keeps_host_contention_out_of_the_ranked_fixes(tmp_path: Path) -> None:
    root = write_agent(
        tmp_path / "offline", start={"facts": {}}, batches=[_input_bound_on_a_busy_host()]
    )
    report = analyze_path(root)
    assert [f.id for f in report.host_conditions] == ["cpu.host_contention"]
    assert report.findings and report.findings[0].id == "dataloader.num_workers"
    assert all(f.risk != "system" for f in report.findings)
    text = render_text(report)
    ranked, _, host = text.partition(HOST_CONDITIONS_HEADING)
    assert "1. [dataloader.num_workers]" in ranked and "cpu.host_contention" not in ranked
    assert host.split("\n")[1].startswith("- [cpu.host_contention] ")  # listed, not ranked


def test_the_json_gives_host_conditions_their_own_list(tmp_path: Path) -> None:
    root = write_agent(
        tmp_path / "offline", start={"facts": {}}, batches=[_input_bound_on_a_busy_host()]
    )
    done = subprocess.run(
        [sys.executable, "-m", "perfweb_recommender", "analyze", str(root), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert [f["id"] for f in body["host_conditions"]] == ["cpu.host_contention"]
    assert [f["risk"] for f in body["findings"]].count("system") == 0
    assert body["findings"][0]["id"] == "dataloader.num_workers"


def _finding(rule_id: str, risk: str, gain: float, *, critical: bool = False) -> Finding:
    return Finding(
        id=rule_id,
        title=rule_id,
        risk=risk,
        confidence=1.0,
        estimated_gain=gain,
        gain_basis="measured: test",
        evidence=[],
        fix=Fix(text="x"),
        critical=critical,
    )


def test_a_host_condition_never_ranks_ahead_of_a_workload_fix() -> None:
    contention = _finding("cpu.host_contention", "system", 0.9)
    small = _finding("model.quantization", "model", 0.01)
    ranked = rank_findings([contention, small])
    assert [f.id for f in ranked] == ["model.quantization", "cpu.host_contention"]
    fixes, host = split_findings(ranked)
    assert [f.id for f in fixes] == ["model.quantization"]
    assert [f.id for f in host] == ["cpu.host_contention"]
