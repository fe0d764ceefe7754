"""The report builder and parser on a recorded example in the shape of an H200 run
(fixtures/h200-shaped-raw.json, hand-made: not a measurement)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.gpu.expectations import BY_WORKLOAD
from bench.gpu.markdown import render_markdown
from bench.gpu.report import SCHEMA, build_report, load_report, outcome, validate_report

FIXTURE = Path(__file__).parent / "fixtures" / "h200-shaped-raw.json"


@pytest.fixture()
def report() -> dict:
    return build_report(json.loads(FIXTURE.read_text(encoding="utf-8")))


def test_it_judges_each_planted_cause_found_first_lower_or_missed(report: dict) -> None:
    outcomes = {name: w["expected"]["outcome"] for name, w in report["workloads"].items()}
    assert outcomes == {
        "pageable_h2d": "found_lower",  # copy.synchronous_h2d ranked above pin_memory
        "fp32_matmul": "found_lower",
        "fp32_conv": "failed",  # reported with its error; the rest ran
        "empty_cache": "found_first",
        "item_sync": "found_first",
        "launch_bound": "found_first",
        "input_bound": "found_first",
        "fp16_no_scaler": "missed",
        "idle_held": "inputs_only",
        "healthy_bf16": "clean",
    }
    pageable = report["workloads"]["pageable_h2d"]["expected"]
    assert (pageable["rank"], pageable["top"]) == (2, "copy.synchronous_h2d")


def test_it_counts_outcomes_failures_nvml_and_ab_verdicts(report: dict) -> None:
    summary = report["summary"]
    assert summary["outcomes"]["found_first"] == 4 and summary["outcomes"]["found_lower"] == 2
    assert summary["workloads_failed"] == ["fp32_conv"]
    assert (summary["nvml_ok"], summary["nvml_checked"]) == (9, 10)
    assert summary["overhead_pct"] == {"agent-1hz": 0.1, "agent-10hz": 0.31, "profiler": 0.48}
    assert summary["ab"] == {"amp=bf16": "faster", "pin_memory=true": None}


def test_it_checks_a_rule_that_needs_minutes_on_its_inputs_only(report: dict) -> None:
    idle = report["workloads"]["idle_held"]["expected"]
    assert idle["inputs_ok"] is True
    assert "idle window 21 s of the rule's 300 s" in idle["detail"]


def test_it_never_judges_a_failed_workload_on_what_it_left_behind(report: dict) -> None:
    conv = report["workloads"]["fp32_conv"]["expected"]
    assert conv["outcome"] == "failed"
    assert conv["detail"] == "exit code 1; RuntimeError: CUDA error: out of memory"


def test_it_calls_a_big_finding_on_the_healthy_loop_a_false_alarm() -> None:
    diag = {
        "status": "ok",
        "analysis": {
            "status": "ok",
            "findings": [{"id": "precision.tf32", "estimated_gain": 0.1, "score": 0.04}],
        },
    }
    assert outcome(BY_WORKLOAD["healthy_bf16"], diag)["outcome"] == "false_alarm"


def test_a_finding_about_the_host_is_recorded_but_not_ranked_against_the_plant() -> None:
    findings = [
        {"id": "cpu.host_contention", "risk": "system", "estimated_gain": 0.35},
        {"id": "memory.empty_cache_in_loop", "risk": "data-path", "estimated_gain": 0.1},
    ]
    diag = {"status": "ok", "analysis": {"status": "ok", "findings": findings}}
    judged = outcome(BY_WORKLOAD["empty_cache"], diag)
    assert judged["outcome"] == "found_first" and judged["rank"] == 1
    assert judged["host_findings"] == ["cpu.host_contention"]


def test_the_kits_own_thread_count_is_not_ranked_against_the_plant_on_a_cpu() -> None:
    """The kit runs its CPU loops on one intra-op thread: on a CPU, the finding that names
    that thread count is the kit's, recorded apart; on a GPU run it stays in the ranking."""
    findings = [
        {"id": "cpu.threads_too_few", "risk": "data-path", "estimated_gain": 0.2},
        {"id": "memory.empty_cache_in_loop", "risk": "data-path", "estimated_gain": 0.1},
    ]
    for device, expected in (("cpu", "found_first"), ("cuda", "found_lower")):
        diag = {
            "status": "ok",
            "workload": {"steps": 40, "device": device},
            "analysis": {"status": "ok", "findings": findings},
        }
        judged = outcome(BY_WORKLOAD["empty_cache"], diag)
        assert judged["outcome"] == expected, device
    assert judged.get("kit_setting_findings") is None
    diag["workload"]["device"] = "cpu"
    assert outcome(BY_WORKLOAD["empty_cache"], diag)["kit_setting_findings"] == [
        "cpu.threads_too_few"
    ]


def test_it_writes_a_readable_summary_with_every_part(report: dict) -> None:
    text = render_markdown(report)
    for heading in (
        "## Planted causes",
        "## NVML series",
        "## Trace classification",
        "## Agent overhead",
        "## A/B",
    ):
        assert heading in text
    assert "| pageable_h2d | DataLoader pin_memory=False" in text
    assert "found lower | 2 | copy.synchronous_h2d (0.290)" in text
    assert "| agent-10hz | 3 | 2.920 (2.909–2.940) | 1.0031 (0.9986–1.0079) | +0.31% |" in text
    assert (
        "| `amp=bf16` | fp32_matmul | faster | 5.84× | 5.61–6.02× | 8.42 | 1.44 | within |" in text
    )
    assert "RuntimeError: DataLoader worker exited unexpectedly" in text
    assert "148.2 (131.0–170.4) ms extra" in text


def test_it_reads_back_a_written_report(report: dict, tmp_path: Path) -> None:
    path = tmp_path / "gpu-check.json"
    path.write_text(json.dumps(report))
    loaded = load_report(path)
    assert loaded["schema"] == SCHEMA and validate_report(loaded) == []
    assert loaded["workloads"]["item_sync"]["expected"]["outcome"] == "found_first"


def test_it_refuses_a_malformed_report(report: dict, tmp_path: Path) -> None:
    broken = dict(report, workloads={**report["workloads"], "item_sync": {"status": "ran"}})
    del broken["probe"]
    problems = validate_report(broken)
    assert "probe: missing or not dict" in problems
    assert "workloads.item_sync.status: 'ran'" in problems
    assert "workloads.item_sync.expected.outcome: missing or unknown" in problems
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(ValueError, match="malformed report: probe: missing"):
        load_report(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not a readable JSON report"):
        load_report(path)


def analysed(run: dict) -> dict:
    return {"status": "ok", "analysis": {"status": "ok", "findings": [], "run": run}}


def test_it_checks_that_the_phases_sum_to_the_step_and_the_mfu_bounds() -> None:
    from bench.gpu.report import anatomy_check

    matmul, launch = BY_WORKLOAD["bf16_matmul"], BY_WORKLOAD["launch_bound"]
    near_peak = {
        "anatomy": {"sum_error": 0.0, "largest": "backward"},
        "compute": {"mfu": 0.62, "peak_source": "H200 SXM bf16 (datasheet)"},
    }
    assert anatomy_check(matmul, analysed(near_peak))["ok"]
    assert not anatomy_check(launch, analysed(near_peak))["ok"]  # launch-bound must stay low
    far_below = {"anatomy": {"sum_error": 0.08}, "compute": {"mfu": 0.2}}
    check = anatomy_check(matmul, analysed(far_below))
    assert not check["ok"]
    assert check["detail"] == "phases sum to the step within 8.0% > 5%; MFU 20.0% < 50%"
    no_peak = {"anatomy": {"sum_error": 0.0}, "compute": {"mfu": None, "reason": "no peak"}}
    unknown = anatomy_check(matmul, analysed(no_peak))
    assert unknown["detail"] == "no MFU: no peak"
    assert anatomy_check(matmul, analysed({}))["detail"] == "no step anatomy in the analysis"
