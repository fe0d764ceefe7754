"""Process collector: CPU %, RSS and threads of this process and of its children summed.

Children are DataLoader workers (and whatever else the script forks); they are reported as
device `workers`. On Linux /proc is read directly (one small file per process per tick);
elsewhere psutil is used when installed. The source is injectable so tests can hand in a
fake one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from perfweb_agent.collectors.found import Found
from perfweb_agent.core.buffer import Sample
from perfweb_agent.core.logger import say_once
from perfweb_contract.protocol import DeviceNaming


class ProcessSource(Protocol):
    """Where process numbers come from."""

    def own(self) -> tuple[float, float, float] | None:
        """(cpu_percent, rss_bytes, threads) of this process."""

    def children(self) -> tuple[float, float, float, int] | None:
        """(cpu_percent, rss_bytes, threads, count) summed over child processes."""


def task_children(pid: int, tasks: Iterable[str] | None = None) -> dict[str, list[int]] | None:
    """Children per thread from /proc/<pid>/task/<tid>/children, or None where not offered.

    `tasks` limits the threads read (default: all of them).
    """
    base = f"/proc/{pid}/task"
    try:
        names = list(tasks) if tasks is not None else os.listdir(base)
    except OSError:
        return None
    found: dict[str, list[int]] = {}
    for task in names:
        try:
            with open(f"{base}/{task}/children") as handle:
                found[task] = [int(p) for p in handle.read().split()]
        except (OSError, ValueError):
            if task == str(pid):
                return None  # no children file for the main thread: the kernel lacks it
            continue  # a thread that just ended
    return found


def child_pids(pid: int) -> list[int] | None:
    """Direct children of `pid` (without scanning every process), or None."""
    found = task_children(pid)
    return None if found is None else [child for kids in found.values() for child in kids]


class PsutilSource:
    """Process numbers from psutil; child Process objects cached between calls.

    Finding children with psutil reads every process's stat file, so that is done only every
    `rescan_every` calls; /proc/<pid>/task/*/children lists them directly and cheaply, so
    where the kernel offers it children are looked up on every call.
    """

    def __init__(self, pid: int | None = None, rescan_every: int = 5) -> None:
        import psutil

        self._psutil = psutil
        self._proc = psutil.Process(pid or os.getpid())
        self._proc.cpu_percent(None)
        self._children: dict[int, Any] = {}
        self._rescan_every = rescan_every
        self._calls = 0
        self._cheap_children = child_pids(self._proc.pid) is not None
        self.runnable_children: int | None = None  # children running or runnable at the read

    @property
    def pids(self) -> set[int]:
        """This process and its known children."""
        return {self._proc.pid, *self._children}

    def own(self) -> tuple[float, float, float] | None:
        """(cpu_percent, rss_bytes, threads) of this process."""
        with self._proc.oneshot():
            return (
                self._proc.cpu_percent(None),
                float(self._proc.memory_info().rss),
                float(self._proc.num_threads()),
            )

    def _rescan(self) -> None:
        psutil = self._psutil
        pids = child_pids(self._proc.pid)
        if pids is None:
            try:
                pids = [p.pid for p in self._proc.children(recursive=False)]
            except psutil.Error:
                return
        fresh: dict[int, Any] = {}
        for pid in pids:
            known = self._children.get(pid)
            if known is None:
                try:
                    known = psutil.Process(pid)
                    known.cpu_percent(None)  # the base for the next reading
                except psutil.Error:
                    continue
            fresh[pid] = known
        self._children = fresh

    def children(self) -> tuple[float, float, float, int] | None:
        """Sums over direct child processes (DataLoader workers)."""
        if self._cheap_children or self._calls % self._rescan_every == 0:
            self._rescan()
        self._calls += 1
        cpu = rss = threads = 0.0
        runnable = 0
        alive: dict[int, Any] = {}
        for pid, proc in self._children.items():
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
                    threads += proc.num_threads()
                    runnable += proc.status() == self._psutil.STATUS_RUNNING
                alive[pid] = proc
            except self._psutil.Error:
                continue
        self._children = alive
        self.runnable_children = runnable
        return cpu, rss, threads, len(alive)


class ProcfsSource:
    """Linux: /proc/<pid>/stat of this process and of its children; one small read each.

    Cheaper than psutil (which reads several files per process), and stdlib only.
    """

    def __init__(self, pid: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._pid = pid or os.getpid()
        self._clock = clock
        self._ticks = os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._last_cpu: dict[int, tuple[float, float]] = {}  # pid -> (time, cpu seconds)
        self._children: list[int] = []
        # Each read releases the GIL and may make the training thread wait to get it back:
        # read only the threads known to have forked, and all of them every `rescan_every`.
        self._forking_tasks: set[str] = {str(self._pid)}
        self.rescan_every = 10
        self._calls = 0
        # Children in state R (running, or runnable and waiting for a core) at the last read:
        # a DataLoader worker that waits on storage or a sleep is in S or D instead.
        self.runnable_children: int | None = None

    @property
    def pids(self) -> set[int]:
        """This process and the children last seen."""
        return {self._pid, *self._children}

    def _stat(self, pid: int) -> tuple[float, float, float]:
        """(cpu_percent since last read, rss bytes, threads) of one process."""
        percent, rss, threads, _ = self._stat_and_state(pid)
        return percent, rss, threads

    def _stat_and_state(self, pid: int) -> tuple[float, float, float, str]:
        """`_stat` and the process's state letter (R, S, D, ...)."""
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        cpu_s = (int(fields[11]) + int(fields[12])) / self._ticks  # utime + stime
        now = self._clock()
        last = self._last_cpu.get(pid)
        self._last_cpu[pid] = (now, cpu_s)
        if last is not None and now > last[0]:
            percent = 100.0 * (cpu_s - last[1]) / (now - last[0])
        else:  # first sight: the average since the process started, not a false 0%
            percent = self._percent_since_start(cpu_s, started_ticks=int(fields[19]))
        return percent, float(int(fields[21]) * self._page), float(fields[17]), fields[0]

    def _percent_since_start(self, cpu_s: float, *, started_ticks: int) -> float:
        try:
            with open("/proc/uptime") as handle:
                uptime_s = float(handle.read().split()[0])
        except (OSError, ValueError, IndexError):
            return 0.0
        age_s = uptime_s - started_ticks / self._ticks
        return 100.0 * cpu_s / age_s if age_s > 0.05 else 0.0

    def own(self) -> tuple[float, float, float] | None:
        """(cpu_percent, rss_bytes, threads) of this process."""
        return self._stat(self._pid)

    def _child_pids(self) -> list[int] | None:
        full = self._calls % self.rescan_every == 0
        self._calls += 1
        found = task_children(self._pid, None if full else self._forking_tasks)
        if found is None:
            return None
        if full:
            self._forking_tasks = {str(self._pid)} | {t for t, kids in found.items() if kids}
        return [child for kids in found.values() for child in kids]

    def children(self) -> tuple[float, float, float, int] | None:
        """Sums over direct children, or None where the kernel does not list them."""
        pids = self._child_pids()
        if pids is None:
            return None
        cpu = rss = threads = 0.0
        runnable = 0
        alive: list[int] = []
        for pid in pids:
            try:
                c, r, t, state = self._stat_and_state(pid)
            except (OSError, ValueError, IndexError):
                continue
            cpu, rss, threads = cpu + c, rss + r, threads + t
            runnable += state == "R"
            alive.append(pid)
        for gone in set(self._children) - set(alive):
            self._last_cpu.pop(gone, None)
        self._children = alive
        self.runnable_children = runnable
        return cpu, rss, threads, len(alive)


def default_source() -> ProcessSource | None:
    """/proc on Linux (stdlib, cheapest), else psutil, else None (with one log line)."""
    if os.path.exists("/proc/self/stat") and child_pids(os.getpid()) is not None:
        return ProcfsSource()
    try:
        return PsutilSource()
    except ImportError:
        pass
    except Exception as exc:  # noqa: BLE001
        say_once("psutil", "psutil failed (%s)", exc)
    if os.path.exists("/proc/self/stat"):
        say_once("no-psutil", "psutil not installed: process stats from /proc, no worker stats")
        return ProcfsSource()
    say_once("no-procstats", "psutil not installed and no /proc: process stats are off")
    return None


class ThreadSched:
    """The main thread's scheduling since the last reading, from /proc/<pid>/schedstat
    (the thread-group leader's: nanoseconds on a CPU, nanoseconds waiting on a run queue):
    (% of the wall time it ran, % it waited for a CPU). The wait is what a busy host adds to
    the loop's wall time; None without the file or before a second reading."""

    def __init__(self, pid: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = f"/proc/{pid}/schedstat"
        self._clock = clock
        self._last: tuple[float, int, int] | None = None

    def read(self) -> tuple[float, float] | None:
        try:
            with open(self._path) as handle:
                ran_ns, waited_ns = (int(v) for v in handle.read().split()[:2])
        except (OSError, ValueError):
            return None
        now, last = self._clock(), self._last
        self._last = (now, ran_ns, waited_ns)
        if last is None or now <= last[0]:
            return None
        wall_ns = (now - last[0]) * 1e9
        return 100.0 * (ran_ns - last[1]) / wall_ns, 100.0 * (waited_ns - last[2]) / wall_ns


class ProcessCollector:
    """`is_available()` + `collect()` over a ProcessSource."""

    def pids(self) -> set[int]:
        """This process and the children last seen (for NVML per-process memory)."""
        known = getattr(self._found.get(), "pids", None)
        return set(known) if known else {os.getpid()}

    def __init__(
        self,
        source: ProcessSource | None = None,
        clock: Callable[[], float] = time.time,
        naming: DeviceNaming | None = None,
    ) -> None:
        self._found = Found(source, default_source)
        self._clock = clock
        self._naming = naming or DeviceNaming()
        self._sched = ThreadSched(os.getpid())

    def is_available(self) -> bool:
        """True when some source of process numbers exists."""
        return self._found.get() is not None

    def collect(self) -> list[Sample]:
        """One sample per metric for `process` and, when there are children, `workers`."""
        source = self._found.get()
        if source is None:
            return []
        now = self._clock()
        samples: list[Sample] = []
        own = source.own()
        if own is not None:
            samples += _triplet(self._naming.process(), now, own)
        sched = self._sched.read()
        if sched is not None:
            samples += [
                (self._naming.process(), "process.thread_cpu", now, sched[0]),
                (self._naming.process(), "process.run_queue_wait", now, sched[1]),
            ]
        kids = source.children()
        if kids is not None and kids[3] > 0:
            workers = self._naming.workers()
            samples += _triplet(workers, now, kids[:3])
            samples.append((workers, "process.count", now, float(kids[3])))
            runnable = getattr(source, "runnable_children", None)
            if runnable is not None:
                samples.append((workers, "process.runnable", now, float(runnable)))
        return samples


def _triplet(device: str, t: float, values: tuple[float, ...]) -> list[Sample]:
    cpu, rss, threads = values[:3]
    return [
        (device, "process.cpu_percent", t, float(cpu)),
        (device, "process.rss", t, float(rss)),
        (device, "process.threads", t, float(threads)),
    ]
