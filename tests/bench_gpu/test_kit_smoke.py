"""The kit end to end on the CPU in smoke mode: probe, one planted workload under the real
offline agent and the recommender, one `perf-agent ab`, the interleaved overhead runs; one
well-formed JSON report and its Markdown summary."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu.kit import REPORT_JSON, REPORT_MD, WORK_ARCHIVE
from bench.gpu.report import load_report

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_it_runs_every_stage_on_the_cpu_and_writes_a_well_formed_report(tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    env = {k: v for k, v in os.environ.items() if k != "OUT" and not k.startswith("PERF_AGENT_")}
    env.update(OUT=str(out), PYTHON=sys.executable)
    done = subprocess.run(
        [
            "bash",
            str(REPO / "bench" / "gpu" / "run.sh"),
            "--device",
            "cpu",
            "--smoke",
            "--only",
            "empty_cache",
            "--ab",
            "pin_memory=true",
            "--work",
            str(work),
            "--budget-s",
            "240",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = load_report(out / REPORT_JSON)
    assert report["kit"]["device"] == "cpu" and report["probe"]["status"] == "ok"
    diag = report["workloads"]["empty_cache"]
    assert diag["status"] == "ok" and diag["workload"]["steps"] >= 8
    assert diag["analysis"]["status"] == "ok"
    assert diag["expected"]["outcome"] == "found_first"  # the agent counts the calls on a CPU too
    assert diag["anatomy_check"]["ok"], diag["anatomy_check"]  # phases sum to the step
    assert report["summary"]["anatomy_ok"] == report["summary"]["anatomy_checked"] == 1
    assert diag["nvml"] == {
        "present": False,
        "reason": "no gpu:* series (no NVML or no GPU)",
        "devices": {},
    }
    [ab] = report["ab"]
    assert ab["status"] == "ok" and ab["knob"] == "pin_memory=true" and ab["speedup"] > 0
    assert ab["ci_low"] <= ab["speedup"] <= ab["ci_high"]
    assert report["overhead"]["status"] == "ok"
    assert set(report["overhead"]["modes"]) == {"baseline", "agent-1hz", "agent-10hz", "profiler"}
    assert "## Planted causes" in (out / REPORT_MD).read_text(encoding="utf-8")
    assert (out / WORK_ARCHIVE).stat().st_size > 0


def test_it_reports_each_failing_workload_and_still_runs_the_next(tmp_path: Path) -> None:
    # --device cuda on a machine whose torch sees no GPU: every workload exits 1 at once.
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine may have a GPU")
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.gpu.kit",
            "--device",
            "cuda",
            "--only",
            "item_sync,healthy_bf16",
            "--skip",
            "overhead,ab",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=200,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = load_report(out / REPORT_JSON)
    for name in ("item_sync", "healthy_bf16"):
        diag = report["workloads"][name]
        assert diag["status"] == "failed"
        assert diag["error"].startswith("exit code 1;") and "no CUDA device" in diag["error"]
        assert diag["expected"]["outcome"] == "failed"
    assert report["summary"]["workloads_failed"] == ["item_sync", "healthy_bf16"]


def test_it_skips_what_no_longer_fits_its_budget_and_still_writes_the_report(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.gpu.kit",
            "--device",
            "cpu",
            "--smoke",
            "--budget-s",
            "16",
            "--only",
            "healthy_bf16",
            "--ab",
            "amp=bf16",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = load_report(out / REPORT_JSON)
    diag = report["workloads"]["healthy_bf16"]
    assert diag["status"] == "skipped" and diag["error"].startswith("time budget:")
    assert diag["expected"]["outcome"] == "skipped"
    assert [a["status"] for a in report["ab"]] == ["skipped"]
    assert report["overhead"]["status"] == "skipped"
    assert "time budget" in report["overhead"]["error"]
