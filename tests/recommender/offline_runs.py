"""Offline agent directories built by hand with the protocol's names (docs/protocol.md), for
runs the agent of this checkout cannot produce on its own yet (inference requests with batch
sizes, host-wide CPU)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.agent.conftest import ROOT, attach

RUN = "run0123456789"


def write_agent(
    root: Path, *, start: dict[str, Any], batches: list[dict[str, Any]], agent_id: str = "agent0001"
) -> Path:
    """One agent's start.json, batches and finish.json under root/RUN/agent_id."""
    folder = root / RUN / agent_id
    folder.mkdir(parents=True)
    body = {"run_id": RUN, "agent_id": agent_id, "role": "worker", "rank": None, **start}
    (folder / "start.json").write_text(json.dumps(body))
    for seq, batch in enumerate(batches):
        (folder / f"batch-{seq:08d}.json.gz").write_bytes(gzip.compress(json.dumps(batch).encode()))
    (folder / "finish.json").write_text(json.dumps({"run_id": RUN, "exit_code": 0}))
    return root


def attach_with_a_window(
    script: Path, offline: Path, *, args: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`perf-agent attach --offline` of `script` (with `args`) by the agent of this checkout,
    with fast ticks, one thread and a profiler window over the steps after the fifth."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    env.update(
        PERF_AGENT_INTERVAL="0.2",
        PERF_AGENT_PROFILE_WARMUP_STEPS="5",
        PERF_AGENT_PROFILE_STEPS="5",
        PYTHONPATH=str(ROOT),
        OMP_NUM_THREADS="1",
    )
    command = [sys.executable, str(script), *(args or [])]
    return attach(["--offline", str(offline), "--", *command], env, timeout=180)


def inference_batch(
    latencies_s: list[float], *, batch_size: int, t0: float = 1000.0, gap_s: float = 0.0
) -> dict[str, Any]:
    """Requests served back to back (plus `gap_s` idle between them), each of `batch_size`
    samples, with the process's RSS and the agreed inference facts."""
    ends, t = [], t0
    for latency in latencies_s:
        t += latency
        ends.append(t)
        t += gap_s
    return {
        "facts": {"workload.kind": "inference", "steps.source": "module", "torch.version": "2.13"},
        "metrics": [
            {
                "device": "rank:0",
                "name": "step.batch_size",
                "t": ends,
                "v": [float(batch_size)] * len(ends),
            },
            {
                "device": "process",
                "name": "process.rss",
                "t": [ends[0], ends[-1]],
                "v": [5.0e8, 7.5e8],
            },
        ],
        "steps": {
            "rank": 0,
            "index": list(range(len(ends))),
            "t": ends,
            "duration": latencies_s,
            "data_wait": [0.0] * len(ends),
        },
    }
