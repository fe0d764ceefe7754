"""Realistic agent batches: 8 GPUs × 12 NVML metrics at 1–10 Hz, plus process metrics and
steps, with the value shapes NVML gives (integer percents, bytes, watts in mW steps, MHz)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

GPU_METRICS = (
    "gpu.utilization",
    "gpu.memory_utilization",
    "gpu.memory_used",
    "gpu.power",
    "gpu.temperature",
    "gpu.sm_clock",
    "gpu.pcie_tx",
    "gpu.pcie_rx",
    "gpu.throttle_reasons",
    "gpu.process_memory",
    "gpu.sm_active",
    "gpu.tensor_active",
)


def walk(
    rng: np.random.Generator, n: int, start: float, sigma: float, low: float, high: float
) -> np.ndarray:
    return np.clip(start + np.cumsum(rng.normal(0, sigma, n)), low, high)


def gpu_values(rng: np.random.Generator, name: str, n: int) -> np.ndarray:
    if name in ("gpu.utilization", "gpu.memory_utilization"):
        return np.round(walk(rng, n, 80, 4, 0, 100))
    if name in ("gpu.memory_used", "gpu.process_memory"):
        return np.round(walk(rng, n, 6e10, 2e8, 1e9, 8e10) / 2**20) * 2**20
    if name == "gpu.power":
        return np.round(walk(rng, n, 450, 15, 60, 700) * 1000) / 1000  # mW steps
    if name == "gpu.temperature":
        return np.round(walk(rng, n, 65, 0.3, 30, 90))
    if name == "gpu.sm_clock":
        return np.round(walk(rng, n, 1755, 15, 210, 1980) / 15) * 15
    if name in ("gpu.pcie_tx", "gpu.pcie_rx"):
        return np.round(rng.gamma(2, 2e5, n)) * 1024  # KB/s from NVML
    if name == "gpu.throttle_reasons":
        return rng.choice([0.0, 0.0, 0.0, 4.0, 1.0], n)
    return np.round(walk(rng, n, 60, 3, 0, 100), 2)  # GPM activity %


@dataclass
class AgentStream:
    """One agent (one run) sending a batch every `batch_seconds`."""

    gpus: int = 8
    hz: float = 10.0
    batch_seconds: float = 5.0
    t0: float = 1764496800.0
    seed: int = 0
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    agent_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    seq: int = 0
    steps_done: int = 0

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def start_body(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "name": f"bench-{self.run_id[:6]}",
            "role": "launcher",
            "command": ["python", "train.py"],
            "cwd": "/bench",
            "host": "bench-host",
            "pid": 1,
            "started_at": self.t0,
            "devices": [
                {"key": f"gpu:{i}", "kind": "gpu", "index": i, "name": "H100"}
                for i in range(self.gpus)
            ],
        }

    def next_batch(self) -> tuple[dict[str, Any], int]:
        """The next batch body and how many samples (metrics and step series) it carries."""
        start = self.t0 + self.seq * self.batch_seconds
        per_gpu = int(self.hz * self.batch_seconds)
        metrics = []
        samples = 0
        for gpu in range(self.gpus):
            t = start + np.arange(per_gpu) / self.hz + self.rng.normal(0, 5e-4, per_gpu)
            for name in GPU_METRICS:
                metrics.append(
                    {
                        "device": f"gpu:{gpu}",
                        "name": name,
                        "t": t,
                        "v": gpu_values(self.rng, name, per_gpu),
                    }
                )
                samples += per_gpu
        n = max(1, int(self.batch_seconds))
        t = start + np.arange(n) + self.rng.normal(0, 5e-4, n)
        for name, values in (
            ("process.cpu_percent", np.round(walk(self.rng, n, 250, 10, 0, 800), 1)),
            ("process.rss", np.round(walk(self.rng, n, 8e9, 1e7, 1e9, 6e10))),
            ("process.threads", np.full(n, 64.0)),
        ):
            metrics.append({"device": "process", "name": name, "t": t, "v": values})
            samples += n
        steps = int(2 * self.batch_seconds)  # 2 steps/s
        durations = np.round(self.rng.gamma(20, 0.025, steps), 6)
        step_t = start + np.cumsum(durations)
        body = {
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "seq": self.seq,
            "sent_at": start + self.batch_seconds,
            "metrics": metrics,
            "steps": {
                "rank": 0,
                "index": list(range(self.steps_done, self.steps_done + steps)),
                "t": step_t,
                "duration": durations,
                "data_wait": np.round(durations * 0.1, 6),
            },
            "dropped": 0,
        }
        self.seq += 1
        self.steps_done += steps
        return body, samples + 2 * steps
