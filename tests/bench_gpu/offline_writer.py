"""Writes an agent offline directory (docs/protocol.md layout) with chosen GPU series."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

H200 = {
    "key": "gpu:0", "kind": "gpu", "index": 0, "name": "NVIDIA H200",
    "memory_total": 150_754_820_096, "power_limit": 700.0,
}  # fmt: skip


def write_offline(
    root: Path, series: dict[str, list[float]], *, device: dict | None = None,
    interval_s: float = 1.0, t0: float = 1_764_579_600.0,
) -> Path:  # fmt: skip
    """One run, one agent: start.json with the device, one batch per 5 samples."""
    agent = root / "run0123" / "agent0"
    agent.mkdir(parents=True)
    device = device or H200
    (agent / "start.json").write_text(json.dumps({"run_id": "run0123", "devices": [device]}))
    length = max((len(v) for v in series.values()), default=0)
    for batch, first in enumerate(range(0, length, 5)):
        metrics = [
            {
                "device": device["key"],
                "name": name,
                "t": [t0 + i * interval_s for i in range(first, min(first + 5, len(values)))],
                "v": values[first : first + 5],
            }
            for name, values in series.items()
            if values[first : first + 5]
        ]
        body = {"metrics": metrics, "devices": [device] if batch == 0 else []}
        (agent / f"batch-{batch:08d}.json.gz").write_bytes(gzip.compress(json.dumps(body).encode()))
    return root


def busy_h200(seconds: int = 10) -> dict[str, list[float]]:
    """Series as an H200 shows them under a compute-bound loop (idle first and last sample)."""
    busy = [0.0] + [97.0] * (seconds - 2) + [0.0]
    return {
        "gpu.utilization": busy,
        "gpu.memory_utilization": [u / 3 for u in busy],
        "gpu.memory_used": [5.6e8] + [9.1e9] * (seconds - 1),
        "gpu.power": [118.0] + [612.0] * (seconds - 2) + [140.0],
        "gpu.sm_clock": [345.0] + [1980.0] * (seconds - 1),
        "gpu.temperature": [31.0] + [48.0] * (seconds - 1),
        "gpu.throttle_reasons": [1.0] + [0.0] * (seconds - 1),
        "gpu.process_memory": [0.0] + [8.9e9] * (seconds - 1),
        "gpu.sm_active": [0.0] + [91.0] * (seconds - 1),
        "gpu.tensor_active": [0.0] + [64.0] * (seconds - 1),
        "gpu.dram_active": [0.0] + [22.0] * (seconds - 1),
        "gpu.energy": _integrated([118.0] + [612.0] * (seconds - 2) + [140.0]),
    }


def _integrated(watts: list[float], start_j: float = 9.3e8) -> list[float]:
    """An energy counter (J) that a GPU drawing `watts` at 1 Hz would show."""
    counter, total = [], start_j
    for w in watts:
        counter.append(total)
        total += w
    return counter
