"""Are the agent's NVML series in an offline directory present and plausible?

Reads the offline layout (docs/protocol.md) with the standard library only, so it runs where
the recommender's wheels are missing. Every check is `ok` True / False, or None when it does
not apply (a value the GPU does not support, a workload that is not meant to be busy).
"""

from __future__ import annotations

import gzip
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IDLE_UTILIZATION_PCT = 1.0  # the rule's "about 0%" (recommender/perfweb_recommender/rules/gpu.py)
BUSY_UTILIZATION_PCT = 50.0  # a compute-heavy workload should reach this at least once
MIN_SAMPLE_SHARE = 0.5  # samples expected: at least this share of duration / interval
CLOCK_MHZ = (100.0, 4000.0)
TEMPERATURE_C = (5.0, 110.0)
POWER_MARGIN = 1.2  # power readings may exceed the limit briefly, not by this much
GPM_SERIES = ("gpu.sm_active", "gpu.tensor_active", "gpu.dram_active")
CORE_SERIES = ("gpu.utilization", "gpu.memory_used", "gpu.power", "gpu.sm_clock")
GIB = float(1 << 30)
ENERGY_POWER_RATIO = (0.5, 2.0)  # energy counter's average watts / the power samples' mean


@dataclass(frozen=True)
class Series:
    """One GPU's series: time stamps and values, in time order."""

    t: list[float]
    v: list[float]


def _json(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    body = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
    return body if isinstance(body, dict) else {}


def read_gpu_series(offline: Path) -> tuple[dict[str, dict[str, Series]], list[dict[str, Any]]]:
    """{device: {metric: Series}} of every `gpu:*` device, and the GPU device descriptions."""
    points: dict[tuple[str, str], dict[float, float]] = {}
    devices: dict[str, dict[str, Any]] = {}
    for start in sorted(offline.rglob("start.json")):
        bodies = [_json(start)] + [_json(p) for p in sorted(start.parent.glob("batch-*.json.gz"))]
        for body in bodies:
            for device in body.get("devices") or []:
                if isinstance(device, dict) and device.get("kind") == "gpu":
                    devices[str(device.get("key"))] = device
            for metric in body.get("metrics") or []:
                if not str(metric.get("device", "")).startswith("gpu"):
                    continue
                key = (str(metric["device"]), str(metric["name"]))
                points.setdefault(key, {}).update(
                    zip(map(float, metric["t"]), map(float, metric["v"]), strict=False)
                )
    series: dict[str, dict[str, Series]] = {}
    for (device, name), values in points.items():
        ordered = sorted(values.items())
        series.setdefault(device, {})[name] = Series(
            [t for t, _ in ordered], [v for _, v in ordered]
        )
    return series, list(devices.values())


def summarise(values: list[float]) -> dict[str, float]:
    """Count, min, median and max of a series."""
    return {
        "count": len(values),
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
    }


def longest_below(series: Series, limit: float) -> float:
    """Longest stretch (s) over which every sample is below `limit`."""
    longest, start = 0.0, None
    for t, v in zip(series.t, series.v, strict=True):
        if v < limit:
            start = t if start is None else start
            longest = max(longest, t - start)
        else:
            start = None
    return longest


def _check(name: str, ok: bool | None, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail}


def _range(series: dict[str, Series], name: str, low: float, high: float, unit: str) -> dict:
    found = series.get(name)
    if found is None:
        return _check(name, False, "absent")
    lo, hi = min(found.v), max(found.v)
    return _check(
        name, low <= lo and hi <= high, f"{lo:g}..{hi:g} {unit} (plausible {low:g}..{high:g})"
    )


def _energy(series: dict[str, Series]) -> dict[str, Any]:
    """The energy counter never goes back, and its average watts agree with the power samples."""
    energy, power = series.get("gpu.energy"), series.get("gpu.power")
    if energy is None:
        return _check("gpu.energy", None, "absent (no energy counter: pre-Volta or older agent)")
    steps = [b - a for a, b in zip(energy.v, energy.v[1:], strict=False)]
    if any(step < 0 for step in steps):
        return _check("gpu.energy", False, "the counter went backwards")
    span = energy.t[-1] - energy.t[0]
    if power is None or span < 2.0:
        return _check("gpu.energy", True, "non-decreasing")
    watts = (energy.v[-1] - energy.v[0]) / span
    mean = statistics.fmean(power.v)
    low, high = ENERGY_POWER_RATIO
    ok = mean > 0 and low <= watts / mean <= high
    return _check("gpu.energy", ok, f"{watts:.0f} W from the counter vs {mean:.0f} W sampled")


def device_checks(
    series: dict[str, Series], device: dict[str, Any], *, duration_s: float, interval_s: float,
    busy: bool, gpm_supported: bool | None, holds_memory: bool,
) -> list[dict[str, Any]]:  # fmt: skip
    """The plausibility checks of one GPU's series."""
    checks = []
    utilization = series.get("gpu.utilization")
    expected = max(3, int(MIN_SAMPLE_SHARE * duration_s / interval_s))
    count = len(utilization.v) if utilization else 0
    checks.append(
        _check("samples", count >= expected, f"{count} utilisation samples, need >= {expected}")
    )
    checks.append(_range(series, "gpu.utilization", 0.0, 100.0, "%"))
    if utilization and busy:
        peak = max(utilization.v)
        checks.append(_check("busy", peak >= BUSY_UTILIZATION_PCT, f"peak utilisation {peak:g}%"))
    total = float(device.get("memory_total") or 0.0)
    checks.append(_range(series, "gpu.memory_used", 1.0, total or float("inf"), "bytes"))
    limit = float(device.get("power_limit") or 0.0)
    checks.append(_range(series, "gpu.power", 1.0, POWER_MARGIN * limit if limit else 2000.0, "W"))
    checks.append(_range(series, "gpu.sm_clock", *CLOCK_MHZ, "MHz"))
    checks.append(_range(series, "gpu.temperature", *TEMPERATURE_C, "°C"))
    process = series.get("gpu.process_memory")
    if process is None:
        checks.append(_check("gpu.process_memory", False, "absent (NVML lists no processes?)"))
    else:
        peak = max(process.v)
        checks.append(
            _check(
                "gpu.process_memory",
                peak > 0 if holds_memory else None,
                f"peak {peak / GIB:.2f} GiB held by this job's processes"
                + ("" if peak > 0 else " (0: NVML does not see the job's PIDs; container?)"),
            )
        )
    checks.append(_energy(series))
    if gpm_supported is False:
        checks.append(_check("gpm", None, "GPM not supported on this GPU"))
    else:
        present = [n for n in GPM_SERIES if n in series]
        ok = len(present) == len(GPM_SERIES) and all(
            0.0 <= v <= 100.0 for n in present for v in series[n].v
        )
        checks.append(_check("gpm", ok if gpm_supported else (ok or None), f"present: {present}"))
    return checks


def check_offline(
    offline: Path, *, duration_s: float, interval_s: float = 1.0, busy: bool = True,
    gpm_supported: bool | None = None, holds_memory: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """The NVML part of the report for one workload's offline directory."""
    if not offline.is_dir():
        return {"present": False, "reason": f"{offline} missing", "devices": {}}
    series, devices = read_gpu_series(offline)
    if not series:
        return {"present": False, "reason": "no gpu:* series (no NVML or no GPU)", "devices": {}}
    by_key = {str(d.get("key")): d for d in devices}
    result: dict[str, Any] = {"present": True, "reason": None, "devices": {}}
    for key, metrics in sorted(series.items()):
        device = by_key.get(key, {})
        checks = device_checks(
            metrics,
            device,
            duration_s=duration_s,
            interval_s=interval_s,
            busy=busy,
            gpm_supported=gpm_supported,
            holds_memory=holds_memory,
        )
        utilization = metrics.get("gpu.utilization")
        memory = metrics.get("gpu.process_memory") or metrics.get("gpu.memory_used")
        result["devices"][key] = {
            "name": device.get("name"),
            "memory_total": device.get("memory_total"),
            "power_limit": device.get("power_limit"),
            "series": {name: summarise(s.v) for name, s in sorted(metrics.items())},
            "idle_window_s": longest_below(utilization, IDLE_UTILIZATION_PCT)
            if utilization
            else None,
            "memory_held_max": max(memory.v) if memory else None,
            "checks": checks,
            "ok": all(c["ok"] is not False for c in checks),
        }
    result["ok"] = all(d["ok"] for d in result["devices"].values())
    return result
