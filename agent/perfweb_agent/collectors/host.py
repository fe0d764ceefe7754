"""Host collector: CPU and memory of the whole host (every process on it), device `host`.

Beside the process's own numbers (agent/perfweb_agent/collectors/process.py) these show when other
jobs take the cores or the memory this one needs. On Linux two small /proc files are read per tick
(`/proc/stat`'s first line, `/proc/meminfo`); elsewhere psutil is used when installed.
The source is injectable so that tests can hand in a fake /proc.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Protocol

from perfweb_agent.collectors.found import Found
from perfweb_agent.core.buffer import Sample
from perfweb_agent.core.logger import say_once

HOST_CPU = "host.cpu_percent"
HOST_MEMORY_USED = "host.memory_used"
HOST_MEMORY_TOTAL = "host.memory_total"


class HostSource(Protocol):
    """Where host-wide numbers come from."""

    def cpu_times(self) -> tuple[float, float] | None:
        """(busy, total) CPU time of all cores since boot, in any one unit."""

    def memory(self) -> tuple[float, float] | None:
        """(used, total) bytes of memory; used = total - available."""


class ProcHostSource:
    """Linux: /proc/stat and /proc/meminfo (stdlib only)."""

    def __init__(self, root: str = "/proc") -> None:
        self._root = root

    def cpu_times(self) -> tuple[float, float] | None:
        """(busy, total) jiffies over all cores; idle and iowait are not busy."""
        with open(os.path.join(self._root, "stat")) as handle:
            fields = handle.readline().split()
        if not fields or fields[0] != "cpu":
            return None
        values = [float(v) for v in fields[1:]]
        # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is
        # already inside user/nice, so only the first eight add up to the total
        total = sum(values[:8])
        idle = values[3] + (values[4] if len(values) > 4 else 0.0)
        return total - idle, total

    def memory(self) -> tuple[float, float] | None:
        """(used, total) bytes from MemTotal and MemAvailable."""
        found: dict[str, float] = {}
        with open(os.path.join(self._root, "meminfo")) as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    found[key] = float(rest.split()[0]) * 1024  # kB
                    if len(found) == 2:
                        break
        if "MemTotal" not in found or "MemAvailable" not in found:
            return None
        return found["MemTotal"] - found["MemAvailable"], found["MemTotal"]


class PsutilHostSource:
    """psutil's cpu_times and virtual_memory (where there is no /proc)."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil

    def cpu_times(self) -> tuple[float, float] | None:
        """(busy, total) seconds over all cores."""
        times = self._psutil.cpu_times()
        total = float(sum(times))
        idle = float(times.idle) + float(getattr(times, "iowait", 0.0))
        return total - idle, total

    def memory(self) -> tuple[float, float] | None:
        """(used, total) bytes; used = total - available, as from /proc."""
        memory = self._psutil.virtual_memory()
        return float(memory.total - memory.available), float(memory.total)


def default_host_source() -> HostSource | None:
    """/proc where there is one, else psutil, else None (with one log line)."""
    if os.path.exists("/proc/stat") and os.path.exists("/proc/meminfo"):
        return ProcHostSource()
    try:
        return PsutilHostSource()
    except ImportError:
        say_once("no-host-stats", "no /proc and no psutil: host-wide CPU and memory are off")
    return None


class HostCollector:
    """`is_available()` + `collect()`: host CPU % (of all cores, 0-100) and memory bytes."""

    def __init__(
        self,
        source: HostSource | None = None,
        clock: Callable[[], float] = time.time,
        device: str = "host",
    ) -> None:
        self._found = Found(source, default_host_source)
        self._clock = clock
        self.device = device
        self._last: tuple[float, float] | None = None

    def is_available(self) -> bool:
        """True when some source of host numbers exists."""
        return self._found.get() is not None

    def collect(self) -> list[Sample]:
        """Memory every tick; CPU % from the second tick on (a share since the last one)."""
        source = self._found.get()
        if source is None:
            return []
        now = self._clock()
        samples: list[Sample] = []
        try:
            times = source.cpu_times()
            memory = source.memory()
        except (OSError, ValueError, IndexError) as exc:
            say_once("host-read", "cannot read host CPU/memory (%s)", exc)
            return []
        if times is not None:
            last, self._last = self._last, times
            if last is not None and times[1] > last[1]:
                share = (times[0] - last[0]) / (times[1] - last[1])
                samples.append((self.device, HOST_CPU, now, 100.0 * min(1.0, max(0.0, share))))
        if memory is not None:
            samples.append((self.device, HOST_MEMORY_USED, now, memory[0]))
            samples.append((self.device, HOST_MEMORY_TOTAL, now, memory[1]))
        return samples
