"""The NVML plausibility check reads the agent's offline directory and flags what is absent
or impossible."""

from __future__ import annotations

from pathlib import Path

from bench.gpu.nvml_check import check_offline
from tests.bench_gpu.offline_writer import busy_h200, write_offline


def _checks(result: dict) -> dict[str, bool | None]:
    return {c["name"]: c["ok"] for c in result["devices"]["gpu:0"]["checks"]}


def test_it_passes_an_h200_shaped_busy_run(tmp_path: Path) -> None:
    result = check_offline(
        write_offline(tmp_path, busy_h200(10)), duration_s=10.0, gpm_supported=True
    )
    assert result["present"] and result["ok"], _checks(result)
    device = result["devices"]["gpu:0"]
    assert device["series"]["gpu.utilization"] == {
        "count": 10,
        "min": 0.0,
        "median": 97.0,
        "max": 97.0,
    }
    assert device["name"] == "NVIDIA H200"


def test_it_flags_impossible_values_and_a_gpu_that_never_got_busy(tmp_path: Path) -> None:
    series = busy_h200(10)
    series["gpu.utilization"] = [20.0] * 9 + [250.0]
    series["gpu.power"] = [5000.0] * 10
    series["gpu.sm_clock"] = [0.0] * 10
    result = check_offline(write_offline(tmp_path, series), duration_s=10.0, gpm_supported=True)
    checks = _checks(result)
    assert checks["gpu.utilization"] is False
    assert checks["gpu.power"] is False
    assert checks["gpu.sm_clock"] is False
    assert result["ok"] is False


def test_it_counts_too_few_samples_for_the_run_s_length(tmp_path: Path) -> None:
    result = check_offline(write_offline(tmp_path, busy_h200(4)), duration_s=30.0)
    assert _checks(result)["samples"] is False


def test_it_requires_gpm_only_where_the_gpu_supports_it(tmp_path: Path) -> None:
    series = {k: v for k, v in busy_h200(10).items() if not k.endswith("_active")}
    offline = write_offline(tmp_path, series)
    assert _checks(check_offline(offline, duration_s=10.0, gpm_supported=True))["gpm"] is False
    assert _checks(check_offline(offline, duration_s=10.0, gpm_supported=False))["gpm"] is None


def test_it_says_when_a_job_s_processes_hold_no_memory_in_nvml_s_view(tmp_path: Path) -> None:
    series = busy_h200(10)
    series["gpu.process_memory"] = [0.0] * 10
    result = check_offline(write_offline(tmp_path, series), duration_s=10.0)
    check = next(
        c for c in result["devices"]["gpu:0"]["checks"] if c["name"] == "gpu.process_memory"
    )
    assert check["ok"] is False and "does not see the job's PIDs" in check["detail"]


def test_it_measures_the_idle_window_and_the_memory_held(tmp_path: Path) -> None:
    series = busy_h200(12)
    series["gpu.utilization"] = [80.0, 80.0] + [0.0] * 10
    result = check_offline(write_offline(tmp_path, series), duration_s=12.0, busy=False)
    device = result["devices"]["gpu:0"]
    assert device["idle_window_s"] == 9.0
    assert device["memory_held_max"] == 8.9e9


def test_it_reports_no_gpu_series_as_absent_not_as_a_failure_to_parse(tmp_path: Path) -> None:
    offline = write_offline(tmp_path, {})
    assert check_offline(offline, duration_s=5.0) == {
        "present": False,
        "reason": "no gpu:* series (no NVML or no GPU)",
        "devices": {},
    }
    assert check_offline(tmp_path / "missing", duration_s=5.0)["present"] is False


def test_it_checks_the_energy_counter_against_the_power_samples(tmp_path: Path) -> None:
    series = busy_h200(10)
    good = check_offline(write_offline(tmp_path / "a", series), duration_s=10.0)
    assert _checks(good)["gpu.energy"] is True
    series["gpu.energy"] = [e * 10 for e in series["gpu.energy"]]  # a counter read as mJ x 10
    assert (
        _checks(check_offline(write_offline(tmp_path / "b", series), duration_s=10.0))["gpu.energy"]
        is False
    )
    series["gpu.energy"] = list(reversed(busy_h200(10)["gpu.energy"]))
    backwards = check_offline(write_offline(tmp_path / "c", series), duration_s=10.0)
    assert _checks(backwards)["gpu.energy"] is False
    del series["gpu.energy"]
    assert (
        _checks(check_offline(write_offline(tmp_path / "d", series), duration_s=10.0))["gpu.energy"]
        is None
    )
