"""What one A/B arm recorded, read back from the offline folder the agent wrote for it.

The layout and batch shape are the agent's own (docs/protocol.md): `<run>/<agent>/batch-*.json.gz`
with `steps` (per rank), `metrics` (each array plain or packed) and `facts`. An arm keeps the
lowest rank's steps in step order, the batch size of each (the `step.batch_size` sample at
the step's end time on the rank's device), the largest `process.rss` sample, the CUDA max
allocated (`torch.cuda_peak`, each device's largest summed over devices) and `workload.kind`.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from perfweb_contract import protocol
from perfweb_contract.loaders import training_loader_from_facts

CUDA_PEAK = "torch.cuda_peak"
PROCESS_RSS = "process.rss"


@dataclass
class OfflineRecord:
    """One arm's steps and resources, as the agent recorded them."""

    durations: list[float] = field(default_factory=list)  # lowest rank, in step order
    batch_sizes: list[int | None] = field(default_factory=list)  # per step; None: not seen
    kind: str = "unknown"  # training | inference | unknown (fact workload.kind)
    peak_rss_bytes: int | None = None  # largest sample of the script's process.rss
    cuda_max_allocated_bytes: int | None = None
    training_loader: int | None = None  # the DataLoader that fed the most optimizer steps


def read_offline(offline_dir: str) -> OfflineRecord:
    """The record of an offline folder (empty when it holds no readable batch)."""
    steps: dict[int, dict[int, tuple[float, float]]] = {}  # rank -> index -> (t, duration)
    sizes: dict[tuple[str, float], float] = {}  # (device, t) -> batch size
    rss: list[float] = []
    cuda: dict[str, float] = {}
    kind = "unknown"
    facts_seen: dict[str, Any] = {}
    for body in _batches(offline_dir):
        _read_steps(body.get("steps"), steps)
        for series in body.get("metrics") or []:
            name, device, times, values = _series(series)
            if name == protocol.STEP_BATCH_SIZE:
                sizes.update(((device, t), v) for t, v in zip(times, values, strict=False))
            elif name == PROCESS_RSS and device.startswith("process"):
                rss.extend(values)
            elif name == CUDA_PEAK and values:
                cuda[device] = max(cuda.get(device, 0.0), max(values))
        facts = body.get("facts")
        if isinstance(facts, dict):
            facts_seen.update(facts)
        if isinstance(facts, dict) and facts.get("workload.kind") in ("training", "inference"):
            kind = facts["workload.kind"]
    record = OfflineRecord(kind=kind, training_loader=training_loader_from_facts(facts_seen))
    record.peak_rss_bytes = int(max(rss)) if rss else None
    record.cuda_max_allocated_bytes = int(sum(cuda.values())) if cuda else None
    if steps:
        rank = min(steps)
        device = protocol.rank_device(rank)
        ordered = [steps[rank][i] for i in sorted(steps[rank])]
        record.durations = [duration for _t, duration in ordered]
        record.batch_sizes = [_whole(sizes.get((device, t))) for t, _duration in ordered]
    return record


def _batches(offline_dir: str) -> Iterator[dict[str, Any]]:
    for root, _dirs, files in sorted(os.walk(offline_dir)):
        for name in sorted(files):
            if not (name.startswith("batch-") and name.endswith(".json.gz")):
                continue
            try:
                with gzip.open(os.path.join(root, name)) as handle:
                    body = json.load(handle)
            except (OSError, ValueError):
                continue
            if isinstance(body, dict):
                yield body


def _floats(values: object) -> list[float]:
    if isinstance(values, str):
        try:
            return protocol.unpack_floats(values)
        except ValueError:
            return []
    if not isinstance(values, list):
        return []
    return [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]


def _read_steps(body: object, into: dict[int, dict[int, tuple[float, float]]]) -> None:
    if not isinstance(body, dict):
        return
    try:
        rank = int(body.get("rank") or 0)
    except (TypeError, ValueError):
        return
    indexes = _floats(body.get("index"))
    times, durations = _floats(body.get("t")), _floats(body.get("duration"))
    if len(times) != len(indexes):  # an older batch without `t`: no batch sizes to pair
        times = [float("nan")] * len(indexes)
    into.setdefault(rank, {}).update(
        (int(i), (t, d)) for i, t, d in zip(indexes, times, durations, strict=False)
    )


def _series(series: object) -> tuple[str, str, list[float], list[float]]:
    if not isinstance(series, dict):
        return "", "", [], []
    times, values = _floats(series.get("t")), _floats(series.get("v"))
    return str(series.get("name") or ""), str(series.get("device") or ""), times, values


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)
