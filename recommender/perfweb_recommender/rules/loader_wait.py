"""Why the loop waits on its DataLoader workers: storage (more workers help, beyond the cores)
or CPU (the workers already use every core the job gets: more workers cannot help).

Both read the same signals: the loop's wait (agent step timings), the workers' state and
CPU (the `workers` process series: how many were running or runnable at each sample, their
CPU summed, how many there were) and the cores the job can get (its usable cores, less what
other processes on the host take). A worker that is seldom runnable waits on something else
than a core — storage, the network, a sleep; one that is runnable most of the time computes,
or waits for a core on a busy host, where its CPU share alone cannot tell the two apart.
Without the state samples (an older agent) the CPU share decides, on a host with free cores
only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, counted, finding, rule
from perfweb_recommender.rules.signals import (
    data_wait_share,
    median,
    training_loader,
    usable_cores,
)
from perfweb_recommender.rules.snippets import dataloader_snippet
from perfweb_recommender.thresholds import DATA_WAIT_SHARE_MIN

# A worker the loop waits on and that computes is runnable (running or waiting for a core)
# nearly all the time: a CPU plant read 0.84 at load 12. One asleep in at least 40% of the
# samples waits on something else; its short bursts of collation stretch on a busy host
# (an I/O plant read 0.20-0.45 at load 12-17).
IO_RUNNABLE_MAX = 0.6
CPU_RUNNABLE_MIN = 0.75
IO_WORKER_BUSY_MAX = 0.3  # without state samples: CPU time / wall time below this is I/O
CPU_WORKER_BUSY_MIN = 0.5  # without state samples: at or above, the workers compute
# On a saturated host every wall time is inflated, the loop's wait included (idle workers
# with full queues and a starved training process look like a wait on data): only a loop
# that waits most of the time is judged there.
WAIT_SHARE_MIN_BUSY_HOST = 0.5
SATURATED_SHARE = 0.85  # the job's CPU at this share of the cores it can get: saturated
HOST_SATURATED_PERCENT = 90.0  # host-wide CPU (% of all cores): no core left to take
WAIT_RECOVERABLE = 0.9  # the same share dataloader.num_workers assumes workers can hide
IO_WORKERS_MARGIN = 1.25  # workers beyond the bare estimate, for uneven sample times
IO_WORKERS_CAP = 16  # workers proposed at most (each holds a copy of the dataset)
CHEAPER_SAMPLES_RECOVERED = 0.5  # prior: samples made twice as cheap recover half the wait


def sleeping_workers(*, load: float, wait: float, busy: float, cores: int, at_least: int) -> int:
    """Workers enough to hide the wait of a loader that sleeps (storage, the network): one
    batch takes `load` of today's steps to load, the loop consumes one per (1 - wait) step,
    and each worker computes `busy` of the time, so their CPU together stays within the
    `cores` less the one the training process needs; `at_least` at the least."""
    needed = math.ceil(load / max(0.05, 1 - wait) * IO_WORKERS_MARGIN)
    affordable = int(max(1, cores - 1) / max(busy, 0.01))
    return max(at_least, min(needed, affordable, IO_WORKERS_CAP))


@dataclass(frozen=True)
class LoaderCpu:
    """The loop's wait and its workers' CPU, in cores."""

    wait_share: float  # of steady step time, blocked on the DataLoader
    workers: int  # workers of the DataLoader the training loop waits on (facts)
    worker_busy: float  # one worker's CPU time / wall time (median sample)
    job_cores: float  # the job's processes and workers together, cores in use
    available_cores: float  # cores the job can get: usable, less what others take
    host_saturated: bool
    usable_cores: int
    runnable_share: float | None  # of worker samples in state R (None: not sampled)

    @property
    def saturated(self) -> bool:
        """The job uses (nearly) every core it can get."""
        return self.host_saturated or self.job_cores >= SATURATED_SHARE * self.available_cores

    @property
    def judged(self) -> bool:
        """Whether the wait is large enough to tell its cause on this host."""
        return not self.host_saturated or self.wait_share >= WAIT_SHARE_MIN_BUSY_HOST

    @property
    def waiting_on_io(self) -> bool:
        """The workers are seldom runnable and take little CPU."""
        if not self.judged or self.worker_busy > IO_WORKER_BUSY_MAX:
            return False
        if self.runnable_share is None:
            return not self.host_saturated
        return self.runnable_share <= IO_RUNNABLE_MAX

    @property
    def computing(self) -> bool:
        """The workers are runnable most of the time (take every bit of CPU they can get)."""
        if not self.judged:
            return False
        if self.runnable_share is None:
            return not self.host_saturated and self.worker_busy >= CPU_WORKER_BUSY_MIN
        return self.runnable_share >= CPU_RUNNABLE_MIN


def loader_cpu(evidence: RunEvidence) -> LoaderCpu | None:
    """The loader's CPU picture, None unless the loop waits on data from worker processes
    whose CPU the agent sampled."""
    wait = data_wait_share(evidence)
    loader = training_loader(evidence)
    workers = int(loader[1].get("num_workers", 0) or 0) if loader else 0
    cores = usable_cores(evidence)
    if wait is None or wait < DATA_WAIT_SHARE_MIN or workers < 1 or not cores:
        return None
    devices = [d for d in evidence.devices_of("process.cpu_percent") if d.startswith("workers")]
    worker_cpu = [sum(v) for v in _aligned(evidence, devices, "process.cpu_percent")]
    counts = [sum(v) for v in _aligned(evidence, devices, "process.count")]
    live = [cpu / count for cpu, count in zip(worker_cpu, counts, strict=False) if count > 0]
    busy = median(live)
    if busy is None:
        return None
    runnable = [sum(v) for v in _aligned(evidence, devices, "process.runnable")]
    sampled = sum(counts[: len(runnable)])
    runnable_share = min(1.0, sum(runnable) / sampled) if runnable and sampled > 0 else None
    own = median(evidence.process_values("process.cpu_percent")) or 0.0
    job_cores = (own + (median(worker_cpu) or 0.0)) / 100.0
    host = median(evidence.values("host.cpu_percent", "host"))
    host_cores = evidence.fact("host.cpu_count", cores)
    available = float(cores)
    saturated = False
    if host is not None and isinstance(host_cores, (int, float)):
        others = max(0.0, host / 100.0 * host_cores - job_cores)
        available = max(0.0, min(float(cores), host_cores - others))
        saturated = host >= HOST_SATURATED_PERCENT
    return LoaderCpu(
        wait_share=wait,
        workers=workers,
        worker_busy=min(1.0, busy / 100.0),
        job_cores=job_cores,
        available_cores=available,
        host_saturated=saturated,
        usable_cores=int(cores),
        runnable_share=runnable_share,
    )


def _aligned(evidence: RunEvidence, devices: list[str], name: str) -> list[list[float]]:
    """Samples of `name` over `devices` (the ranks' workers) at each sample index, from the
    first steady step on (the workers' start-up is not their steady state)."""
    steady = evidence.steady_steps()
    start = min((s.t - s.duration_s for s in steady), default=float("-inf"))
    series = [[v for t, v in evidence.points(name, device) if t >= start] for device in devices]
    length = min((len(s) for s in series), default=0)
    return [[s[i] for s in series] for i in range(length)]


def _items(cpu: LoaderCpu) -> list[Evidence]:
    return [
        Evidence("step time waiting on the DataLoader", cpu.wait_share, "fraction", "metrics"),
        Evidence("DataLoader workers", cpu.workers, "workers", "facts"),
        Evidence("one worker's CPU time / wall time", cpu.worker_busy, "fraction", "metrics"),
        *(
            []
            if cpu.runnable_share is None
            else [
                Evidence("workers runnable", cpu.runnable_share, "fraction of samples", "metrics")
            ]
        ),
        Evidence("the job's CPU (process + workers)", round(cpu.job_cores, 2), "cores", "metrics"),
        Evidence("cores the job can get", round(cpu.available_cores, 2), "cores", "metrics"),
    ]


@rule("dataloader.io_wait", risk="data-path")
def dataloader_io_wait(evidence: RunEvidence) -> Finding | None:
    """What: the loop waits on data while the DataLoader workers spend most of their time
    neither computing nor waiting for a core: their CPU time is far below their wall time.

    Why: the workers wait on storage, the network or a sleep, not on the CPU. Each waiting
    worker takes almost no core, so more workers than cores load in parallel; a cap at the
    core count (the usual advice) leaves the loop waiting.

    Fix: more workers (not capped at the cores), a larger `prefetch_factor`, and local
    caching or faster storage for the samples.
    """
    cpu = loader_cpu(evidence)
    if cpu is None or not cpu.waiting_on_io:
        return None
    # A worker delivers a batch per (workers x step) now.
    target = sleeping_workers(
        load=cpu.workers,
        wait=cpu.wait_share,
        busy=cpu.worker_busy,
        cores=cpu.usable_cores,
        at_least=cpu.workers + 1,
    )
    gain = cpu.wait_share * WAIT_RECOVERABLE
    return finding(
        "dataloader.io_wait",
        title=f"{cpu.wait_share:.0%} of each step waits for data while "
        f"{'its one worker' if cpu.workers == 1 else f'each of its {cpu.workers} workers'} "
        f"computes only {cpu.worker_busy:.0%} of the time (waiting on I/O)",
        confidence=0.8,
        gain=gain,
        basis=f"Amdahl on the measured wait share ({cpu.wait_share:.1%}), "
        f"{WAIT_RECOVERABLE:.0%} assumed hidden by enough workers",
        evidence=_items(cpu),
        fix=Fix(
            text=f"Use {target} workers: each computes only {cpu.worker_busy:.0%} of the time, "
            f"so more of them than the {counted(cpu.usable_cores, 'core')} load in parallel; "
            "prefetch more batches, and cache the samples on fast local storage if you can.",
            snippet=dataloader_snippet(
                evidence, {"num_workers": target, "prefetch_factor": 4, "persistent_workers": True}
            ),
            knobs={"num_workers": target},
        ),
    )


@rule("dataloader.cpu_bound", risk="data-path")
def dataloader_cpu_bound(evidence: RunEvidence) -> Finding | None:
    """What: the loop waits on data while the DataLoader workers already use every core the
    job gets.

    Why: the samples cost CPU to produce (decoding, Python transforms); with the cores
    saturated, another worker only splits the same cores further and the wait stays.

    Fix: make each sample cheaper: pre-decode or cache the data, vectorise the transforms
    (per batch instead of per sample), move augmentation to the GPU, drop transforms the
    model does not need.
    """
    cpu = loader_cpu(evidence)
    if cpu is None or not cpu.computing or not cpu.saturated:
        return None
    gain = cpu.wait_share * CHEAPER_SAMPLES_RECOVERED
    return finding(
        "dataloader.cpu_bound",
        title=f"{cpu.wait_share:.0%} of each step waits for data while the job's processes "
        f"use {cpu.job_cores:.1f} of the {cpu.available_cores:.1f} cores they can get",
        confidence=0.7,
        gain=gain,
        basis=f"measured wait share ({cpu.wait_share:.1%}) x {CHEAPER_SAMPLES_RECOVERED:.0%} "
        "(prior: each sample made twice as cheap)",
        evidence=_items(cpu),
        fix=Fix(
            text="More workers cannot help: the cores are saturated. Make each sample "
            "cheaper — pre-decode or cache the data once, transform whole batches with "
            "tensor operations instead of per-sample Python, or move augmentation to the GPU.",
            snippet="# once, offline: decode and save tensors\n"
            "torch.save([transform(load(p)) for p in paths], 'cache.pt')\n"
            "dataset = TensorDataset(*torch.load('cache.pt'))",
        ),
    )
