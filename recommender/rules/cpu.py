"""Data-path rules about the host CPU: threads and saturation."""

from __future__ import annotations

import statistics

from recommender.evidence import RunEvidence
from recommender.rules.base import Evidence, Finding, Fix, finding, rule
from recommender.rules.signals import ranks_per_host, usable_cores

OVERSUBSCRIPTION_MIN = 1.0  # busy threads / usable cores above this oversubscribes
OVERSUBSCRIPTION_COST = 0.15  # share of CPU-side time lost per 1x of oversubscription
CPU_SATURATED_SHARE = 0.9  # process CPU time / usable cores counted as saturated
GPU_IDLE_UTILIZATION_PCT = 50.0  # GPU utilisation below this while the CPU is saturated
MIN_SAMPLES = 5  # metric samples needed before judging a sustained condition


def _busy_threads(evidence: RunEvidence) -> tuple[int, int, int, int] | None:
    """(threads, intra_op, workers, ranks) competing for this host's cores."""
    intra = evidence.fact("threads.intra_op")
    if not isinstance(intra, int):
        return None
    workers = sum(int(d.get("num_workers", 0) or 0) for d in evidence.dataloaders())
    ranks = ranks_per_host(evidence)
    # DataLoader workers run torch with one intra-op thread each (PyTorch sets it).
    return ranks * (intra + workers), intra, workers, ranks


@rule("cpu.thread_oversubscription", risk="data-path")
def cpu_thread_oversubscription(evidence: RunEvidence) -> Finding | None:
    """What: more busy threads than CPU cores: intra-op threads x processes (ranks + workers).

    Why: OpenMP threads spin and get descheduled; every parallel operator then waits for its
    slowest thread, so CPU-side work (and the feeding of the GPU) slows down.

    Fix: give each process its share of the cores: `OMP_NUM_THREADS` / `torch.set_num_threads`
    = cores per rank minus the DataLoader workers.
    """
    busy = _busy_threads(evidence)
    cores = usable_cores(evidence)
    if busy is None or not cores:
        return None
    threads, intra, workers, ranks = busy
    ratio = threads / cores
    if ratio <= OVERSUBSCRIPTION_MIN:
        return None
    target = max(1, cores // ranks - workers)
    return finding(
        "cpu.thread_oversubscription",
        title=f"{threads} busy threads on {cores} cores ({ratio:.1f}x oversubscribed)",
        confidence=0.6,
        gain=min(0.5, OVERSUBSCRIPTION_COST * (ratio - 1)),
        basis=f"{OVERSUBSCRIPTION_COST:.0%} of CPU-side time per 1x of oversubscription (prior)",
        evidence=[
            Evidence("intra-op threads", intra, "threads", "facts"),
            Evidence("DataLoader workers", workers, "processes", "facts"),
            Evidence("ranks on this host", ranks, "processes", "facts"),
            Evidence("usable cores", cores, "cores", "facts"),
        ],
        fix=Fix(
            text=f"Use {target} intra-op thread(s) per process.",
            snippet=f"OMP_NUM_THREADS={target} python train.py\n"
            f"# or: torch.set_num_threads({target})",
            knob=f"threads={target}",
        ),
    )


@rule("cpu.bound", risk="data-path")
def cpu_bound(evidence: RunEvidence) -> Finding | None:
    """What: the CPU is saturated while the GPU idles.

    Why: Python-side work (data preparation, the training loop, many tiny operators) cannot
    keep the GPU fed; the GPU waits for the host.

    Fix: move work off the Python hot path (vectorise, move preprocessing into DataLoader
    workers), use more workers, or a larger batch per step.
    """
    cpu = evidence.process_values("process.cpu_percent")
    gpu = evidence.values("gpu.utilization")
    cores = usable_cores(evidence)
    if len(cpu) < MIN_SAMPLES or len(gpu) < MIN_SAMPLES or not cores:
        return None
    cpu_share = statistics.median(cpu) / (100.0 * cores)
    gpu_util = statistics.median(gpu)
    threads = evidence.fact("threads.intra_op", cores)
    saturated = cpu_share >= CPU_SATURATED_SHARE or statistics.median(cpu) >= 95.0 * min(
        threads, cores
    )
    if not saturated or gpu_util >= GPU_IDLE_UTILIZATION_PCT:
        return None
    return finding(
        "cpu.bound",
        title=f"CPU saturated while the GPU is {gpu_util:.0f}% busy",
        confidence=0.5,
        gain=(1 - gpu_util / 100.0) * 0.5,
        basis="half of the GPU's idle share, assumed recoverable by feeding it faster",
        evidence=[
            Evidence("process CPU (median)", statistics.median(cpu), "% of one core", "metrics"),
            Evidence("GPU utilisation (median)", gpu_util, "%", "metrics"),
            Evidence("usable cores", cores, "cores", "facts"),
        ],
        fix=Fix(
            text="Feed the GPU faster: more workers, less Python per step, a larger batch.",
            snippet="DataLoader(dataset, ..., num_workers=4)  # and vectorise per-sample code",
        ),
    )
