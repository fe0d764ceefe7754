"""Bounded, columnar buffers between the collectors / training thread and the sender.

Writers append under a small lock; the sender swaps the contents out in one go. When a
buffer is full, new entries are dropped and counted: the training loop never waits and
memory never grows without bound.
"""

from __future__ import annotations

import threading
from typing import Any

Sample = tuple[str, str, float, float]  # device, metric name, time, value


class SampleBuffer:
    """Metric samples grouped by (device, name) into `t`/`v` columns."""

    def __init__(self, max_samples: int = 200_000) -> None:
        self.max_samples = max_samples
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
        self._count = 0
        self.dropped = 0
        self.accepted = 0  # samples taken in since start

    def __len__(self) -> int:
        return self._count

    def add(self, device: str, name: str, t: float, v: float) -> None:
        """Append one sample, or count it as dropped when the buffer is full."""
        with self._lock:
            if self._count >= self.max_samples:
                self.dropped += 1
                return
            columns = self._series.get((device, name))
            if columns is None:
                columns = self._series[(device, name)] = ([], [])
            columns[0].append(t)
            columns[1].append(v)
            self._count += 1
            self.accepted += 1

    def add_at(self, device: str, t: float, values: list[tuple[str, float]]) -> None:
        """Append one sample per (name, value) of `device`, all at time `t`, under one lock
        (perfweb_agent.log's several scalars); those beyond the bound are dropped and counted."""
        with self._lock:
            room = self.max_samples - self._count
            if room < len(values):
                self.dropped += len(values) - max(0, room)
                values = values[: max(0, room)]
            series = self._series
            for name, v in values:
                columns = series.get((device, name))
                if columns is None:
                    columns = series[(device, name)] = ([], [])
                columns[0].append(t)
                columns[1].append(v)
            self._count += len(values)
            self.accepted += len(values)

    def extend(self, samples: list[Sample]) -> None:
        """Append many samples."""
        for device, name, t, v in samples:
            self.add(device, name, t, v)

    def drain(self) -> tuple[list[dict[str, Any]], int]:
        """Take everything: (the batch's `metrics` list, the number of samples in it)."""
        with self._lock:
            series, count = self._series, self._count
            self._series, self._count = {}, 0
        metrics = [
            {"device": device, "name": name, "t": t, "v": v}
            for (device, name), (t, v) in series.items()
        ]
        return metrics, count

    def reset_after_fork(self) -> None:
        """A forked child inherits the lock in any state: give it a fresh one and no data."""
        self._lock = threading.Lock()
        self._series, self._count = {}, 0


class StepBuffer:
    """Step records (index, end time, duration, data wait) as parallel columns."""

    def __init__(self, max_steps: int = 100_000) -> None:
        self.max_steps = max_steps
        self._lock = threading.Lock()
        self._columns: tuple[list[int], list[float], list[float], list[float]] = ([], [], [], [])
        self.dropped = 0
        self.accepted = 0

    def __len__(self) -> int:
        return len(self._columns[0])

    def add(self, index: int, t: float, duration: float, data_wait: float) -> None:
        """Record one step (called from the training thread: must stay cheap)."""
        with self._lock:
            columns = self._columns
            if len(columns[0]) >= self.max_steps:
                self.dropped += 1
                return
            self.accepted += 1
            columns[0].append(index)
            columns[1].append(t)
            columns[2].append(duration)
            columns[3].append(min(data_wait, duration))

    def drain(self, rank: int | None) -> dict[str, Any] | None:
        """Take everything as the batch's `steps` object, or None when empty."""
        with self._lock:
            columns = self._columns
            self._columns = ([], [], [], [])
        if not columns[0]:
            return None
        index, t, duration, data_wait = columns
        return {
            "rank": rank or 0,
            "index": index,
            "t": t,
            "duration": duration,
            "data_wait": data_wait,
        }

    def reset_after_fork(self) -> None:
        """Fresh lock and no data in a forked child."""
        self._lock = threading.Lock()
        self._columns = ([], [], [], [])


class FactBuffer:
    """Facts (flat scalars) changed since the last batch; the latest value wins."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, Any] = {}
        self._pending: dict[str, Any] = {}

    def set(self, key: str, value: Any) -> None:
        """Record a fact; it is sent only if it differs from what was sent before."""
        if value is not None and not isinstance(value, (bool, int, float, str)):
            value = str(value)
        with self._lock:
            if key in self._known and self._known[key] == value:
                return
            self._known[key] = value
            self._pending[key] = value

    def update(self, facts: dict[str, Any]) -> None:
        """Record many facts."""
        for key, value in facts.items():
            self.set(key, value)

    def snapshot(self) -> dict[str, Any]:
        """Every fact known so far."""
        with self._lock:
            return dict(self._known)

    def drain(self) -> dict[str, Any]:
        """Facts changed since the previous drain."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending

    def reset_after_fork(self) -> None:
        """Fresh lock in a forked child."""
        self._lock = threading.Lock()
