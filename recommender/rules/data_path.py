"""Data-path rules: how data moves. Results stay bit-for-bit or statistically identical."""

from __future__ import annotations

import statistics

from recommender.evidence import RunEvidence
from recommender.rules.base import Evidence, Finding, Fix, finding, rule, times
from recommender.rules.cpu_budget import WORKERS_CAP, CoreBudget, core_budget
from recommender.rules.signals import data_wait_share, per_step, trace_share
from recommender.thresholds import DATA_WAIT_SHARE_MIN

DATA_WAIT_RECOVERABLE = 0.9  # workers overlap loading with compute; some wait remains
PAGEABLE_H2D_SHARE_MIN = 0.005  # fraction of step time in pageable host-to-device copies
PINNED_SPEEDUP = 2.0  # pinned copies run ~2x faster than pageable ones (and can be async)
EPOCH_STALL_FACTOR = 5.0  # a step waiting > 5x the median data wait is a worker (re)spawn
EPOCH_STALLS_MIN = 2  # stalls that must recur before we blame worker start-up
H2D_SHARE_MIN = 0.02  # fraction of step time in H2D copies on the compute stream
H2D_OVERLAP_MAX = 0.2  # fraction of those copies overlapped by compute: below = serialised
SYNCS_PER_STEP_MIN = 1.0  # blocking synchronisations per step
SYNC_PRIOR_GAIN = 0.05  # facts only: per-step syncs typically cost a few percent
EMPTY_CACHE_PER_STEP_MIN = 1.0  # torch.cuda.empty_cache() calls per step
EMPTY_CACHE_PRIOR_GAIN = 0.10  # no trace: cudaFree + re-cudaMalloc of the cache every step
ALLOC_CALLS_PER_STEP_MIN = 1.0  # cudaMalloc/cudaFree per steady step
RESERVED_OVER_ALLOCATED_MIN = 1.5  # reserved / allocated bytes, median over the run


@rule("dataloader.num_workers", risk="data-path")
def dataloader_num_workers(evidence: RunEvidence) -> Finding | None:
    """What: the training loop spends a large share of each step waiting for the next batch.

    Why: with `num_workers=0` (or too few workers) the main process loads and collates every
    batch itself, so the model waits on Python data code instead of overlapping with it.

    Fix: raise `num_workers` (bounded by the cores per rank), keep the workers alive with
    `persistent_workers=True` and let each prefetch a few batches (`prefetch_factor`).
    """
    share = data_wait_share(evidence)
    trace_shares = [t.step_shares.get("dataloader", 0.0) for t in evidence.traces if t.steps]
    trace_dl = max(trace_shares) if trace_shares else None
    measured = share if share is not None else trace_dl
    if measured is None or measured < DATA_WAIT_SHARE_MIN:
        return None
    loaders = evidence.dataloaders()
    workers = min((int(d.get("num_workers", 0) or 0) for d in loaders), default=None)
    budget = core_budget(evidence)
    items = [
        Evidence(
            "step time waiting on the DataLoader",
            measured,
            "fraction",
            "metrics (agent step timings)" if share is not None else "trace",
        )
    ]
    if trace_dl is not None and share is not None:
        items.append(Evidence("DataLoader share of profiled steps", trace_dl, "fraction", "trace"))
    confidence, target = 0.7, 4
    if workers is not None:
        items.append(Evidence("num_workers", workers, "workers", "facts"))
        target = max(workers + 1, 2)
    if budget is not None:
        items.append(Evidence("usable cores per rank", budget.per_rank, "cores", "facts"))
        target = budget.workers_target
    if workers is not None:
        confidence = 0.9 if target > workers else 0.4
    return finding(
        "dataloader.num_workers",
        title=f"{measured:.0%} of each step waits for the DataLoader",
        confidence=confidence,
        gain=measured * DATA_WAIT_RECOVERABLE,
        basis=f"Amdahl on the measured wait share ({measured:.1%}), "
        f"{DATA_WAIT_RECOVERABLE:.0%} assumed overlappable by workers",
        evidence=items,
        fix=_workers_fix(budget, target, workers),
    )


def _workers_fix(budget: CoreBudget | None, target: int, workers: int | None) -> Fix:
    """Raise the workers within the core budget (and lower the threads to make room); past
    the cores, more workers only compete with each other: bring them back into the budget."""
    if budget is not None and workers is not None and target < workers:
        return Fix(
            text=f"{workers} worker(s) beside the rank's own thread(s) need more than its "
            f"{budget.per_rank} cores; use {target} worker(s) with {budget.intra_target} "
            "intra-op thread(s) and make each sample cheaper to load (pre-decoded data, "
            "vectorised transforms).",
            snippet=f"torch.set_num_threads({budget.intra_target})\n"
            f"DataLoader(dataset, ..., num_workers={target}, persistent_workers=True)",
            knobs={"num_workers": target},
        )
    if workers is not None and target <= workers:
        return Fix(
            text=f"The {workers} worker(s) are as many as the core budget gives (the rank's "
            f"cores less one, at most {WORKERS_CAP} workers); make each sample cheaper to "
            "load (pre-decoded data, vectorised transforms) and keep the workers alive "
            "between epochs.",
            snippet="DataLoader(dataset, ..., persistent_workers=True, prefetch_factor=4)",
        )
    threads = ""
    snippet_threads = ""
    if budget is not None and budget.intra > budget.intra_target:
        threads = (
            f", and {budget.intra_target} intra-op thread(s) so that "
            f"{budget.ranks} x ({budget.intra_target} + {target}) fits {budget.cores} cores"
        )
        snippet_threads = f"torch.set_num_threads({budget.intra_target})\n"
    return Fix(
        text=f"Load batches in {target} worker processes and keep them alive between "
        f"epochs{threads}.",
        snippet=f"{snippet_threads}DataLoader(dataset, batch_size=..., num_workers={target},\n"
        f"           persistent_workers=True, prefetch_factor=2)",
        knobs={"num_workers": target},
    )


@rule("dataloader.pin_memory", risk="data-path")
def dataloader_pin_memory(evidence: RunEvidence) -> Finding | None:
    """What: host-to-device copies come from pageable (unpinned) memory.

    Why: CUDA must first copy pageable memory into a pinned staging buffer, which halves the
    copy bandwidth and makes the copy synchronous with the host.

    Fix: `pin_memory=True` in the DataLoader and `.to(device, non_blocking=True)` on the batch.
    """
    best: tuple[float, float, int] | None = None
    for trace in evidence.traces:
        row = trace.memcpy.get("HtoD pageable")
        if row:
            share = trace_share(trace, row["us"])
            if best is None or share > best[0]:
                best = (share, row["us"], int(row["count"]))
    pinned_off = [d for d in evidence.dataloaders() if d.get("pin_memory") is False]
    if best is None or best[0] < PAGEABLE_H2D_SHARE_MIN:
        return None
    share, micros, count = best
    items = [
        Evidence("pageable H2D copy time", micros, "µs", "trace"),
        Evidence("pageable H2D copies", count, "copies", "trace"),
        Evidence("share of step time", share, "fraction", "trace"),
    ]
    if pinned_off:
        items.append(Evidence("DataLoader pin_memory", False, "flag", "facts"))
    return finding(
        "dataloader.pin_memory",
        title=f"Pageable host-to-device copies take {share:.1%} of each step",
        confidence=0.8 if pinned_off else 0.6,
        gain=share * (1 - 1 / PINNED_SPEEDUP),
        basis=f"copy share {share:.1%} x (1 - 1/{PINNED_SPEEDUP:g}) for pinned bandwidth",
        evidence=items,
        fix=Fix(
            text="Pin the batches and copy them asynchronously.",
            snippet="loader = DataLoader(dataset, ..., pin_memory=True)\n"
            "x = x.to(device, non_blocking=True)",
            knobs={"pin_memory": True},
        ),
    )


@rule("dataloader.persistent_workers", risk="data-path")
def dataloader_persistent_workers(evidence: RunEvidence) -> Finding | None:
    """What: at every epoch start the loop stalls while DataLoader workers are spawned again.

    Why: without `persistent_workers=True` the worker processes are torn down after each epoch
    and re-created (re-importing, re-opening files) before the next epoch's first batch.

    Fix: `persistent_workers=True` (with `num_workers > 0`).
    """
    loaders = [
        d
        for d in evidence.dataloaders()
        if int(d.get("num_workers", 0) or 0) > 0 and d.get("persistent_workers") is False
    ]
    steps = [s for s in evidence.steps if s.data_wait_s is not None]
    if not loaders or len(steps) < 10:
        return None
    typical = statistics.median(s.data_wait_s or 0.0 for s in steps)
    threshold = max(EPOCH_STALL_FACTOR * typical, 0.05)
    stalls = [s for s in steps[1:] if (s.data_wait_s or 0.0) > threshold]
    if len(stalls) < EPOCH_STALLS_MIN:
        return None
    excess = sum((s.data_wait_s or 0.0) - typical for s in stalls)
    total = sum(s.duration_s for s in steps)
    share = excess / total if total else 0.0
    return finding(
        "dataloader.persistent_workers",
        title=f"{len(stalls)} epoch-start stalls while DataLoader workers respawn",
        confidence=0.6,
        gain=share,
        basis="the stalls' excess wait over the median wait, as a share of all step time",
        evidence=[
            Evidence("stalls", len(stalls), "steps", "metrics (agent step timings)"),
            Evidence("stall time beyond typical wait", excess, "s", "metrics"),
            Evidence("persistent_workers", False, "flag", "facts"),
        ],
        fix=Fix(
            text="Keep the workers alive between epochs.",
            snippet="DataLoader(dataset, ..., num_workers=N, persistent_workers=True)",
            knobs={"persistent_workers": True},
        ),
    )


@rule("copy.synchronous_h2d", risk="data-path")
def copy_synchronous_h2d(evidence: RunEvidence) -> Finding | None:
    """What: host-to-device copies run on the compute stream, serialised with the kernels.

    Why: a copy on the same stream as the model's kernels cannot overlap them, so the GPU
    computes nothing while each batch crosses PCIe.

    Fix: copy with `non_blocking=True` from pinned memory on a side stream and prefetch the
    next batch while the current one computes.
    """
    for trace in evidence.traces:
        copy_us = trace.h2d.get("h2d_on_compute_stream_us", 0.0)
        if copy_us <= 0:
            continue
        overlapped = trace.h2d.get("h2d_overlapped_us", 0.0) / copy_us
        share = trace_share(trace, copy_us - trace.h2d.get("h2d_overlapped_us", 0.0))
        if share < H2D_SHARE_MIN or overlapped > H2D_OVERLAP_MAX:
            continue
        return finding(
            "copy.synchronous_h2d",
            title=f"Host-to-device copies stall the compute stream for {share:.1%} of each step",
            confidence=0.7,
            gain=share,
            basis="Amdahl on the non-overlapped H2D copy time on compute streams",
            evidence=[
                Evidence(
                    "H2D copy time on compute streams", copy_us, "µs", f"trace rank {trace.rank}"
                ),
                Evidence("of which overlapped by compute", overlapped, "fraction", "trace"),
                Evidence("share of step time", share, "fraction", "trace"),
            ],
            fix=Fix(
                text="Prefetch the next batch to the GPU on a side stream while this one computes.",
                snippet="stream = torch.cuda.Stream()\nwith torch.cuda.stream(stream):\n"
                "    next_x = next_x.to(device, non_blocking=True)\n"
                "torch.cuda.current_stream().wait_stream(stream)",
            ),
        )
    return None


@rule("sync.host_device", risk="data-path")
def sync_host_device(evidence: RunEvidence) -> Finding | None:
    """What: the host blocks on the GPU every step (synchronize calls, `.item()`, blocking copies).

    Why: each synchronisation drains the GPU's queue; the CPU cannot enqueue the next kernels
    ahead, so the GPU idles while Python catches up.

    Fix: drop per-step synchronisations; read scalars (loss, metrics) every N steps, or
    accumulate them on the GPU.
    """
    best: Finding | None = None
    for trace in evidence.traces:
        if not trace.launch.get("kernels"):
            continue  # a CPU-only trace: `.item()` there waits on nothing but the CPU itself
        count = sum(v["count"] for v in trace.sync_points.values())
        syncs_per_step = per_step(trace, count)
        if syncs_per_step < SYNCS_PER_STEP_MIN or not trace.steps:
            continue
        host_wait = sum(
            c["host_wait"]["us"] for c in trace.idle_breakdown.values() if "host_wait" in c
        )
        sync_us = sum(v["us"] for v in trace.sync_points.values())
        share = trace_share(trace, min(sync_us, host_wait) if sync_us else host_wait * 0.1)
        candidate = finding(
            "sync.host_device",
            title=f"{syncs_per_step:.1f} blocking host-device synchronisations per step",
            confidence=0.7,
            gain=share,
            basis="time the host spent blocked in sync calls, bounded by the GPU's host-wait idle",
            evidence=[
                Evidence(
                    "synchronisations per step", syncs_per_step, "calls", f"trace rank {trace.rank}"
                ),
                Evidence("calls", ", ".join(sorted(trace.sync_points)), "names", "trace"),
                Evidence("share of step time", share, "fraction", "trace"),
            ],
            fix=_sync_fix(),
        )
        if best is None or candidate.estimated_gain > best.estimated_gain:
            best = candidate
    if best is not None:
        return best
    per_step_fact = evidence.fact("cuda.synchronize_per_step", 0.0)
    if evidence.uses_cuda() and per_step_fact >= SYNCS_PER_STEP_MIN:
        return finding(
            "sync.host_device",
            title=f"torch.cuda.synchronize() called {times(per_step_fact)} per step",
            confidence=0.5,
            gain=SYNC_PRIOR_GAIN,
            basis="prior: per-step synchronisations typically cost a few percent (no trace)",
            evidence=[Evidence("synchronize calls per step", per_step_fact, "calls", "facts")],
            fix=_sync_fix(),
        )
    return None


def _sync_fix() -> Fix:
    return Fix(
        text="Remove per-step synchronisations; log scalars every N steps.",
        snippet="if step % 50 == 0:\n    print(loss.item())  # not every step",
    )


@rule("memory.empty_cache_in_loop", risk="data-path")
def memory_empty_cache_in_loop(evidence: RunEvidence) -> Finding | None:
    """What: `torch.cuda.empty_cache()` runs every step (or more often).

    Why: it returns the caching allocator's free blocks to the driver; the next step must
    cudaMalloc them again, and cudaMalloc/cudaFree synchronise the device.

    Fix: remove the call from the training loop (call it at most between phases).
    """
    calls = float(evidence.fact("cuda.empty_cache_per_step", 0.0) or 0.0)
    if calls < EMPTY_CACHE_PER_STEP_MIN:
        return None
    items = [Evidence("empty_cache calls per step", calls, "calls", "facts")]
    gain, basis = EMPTY_CACHE_PRIOR_GAIN, "prior: re-allocating the cache each step (no trace)"
    confidence = 0.9
    if not evidence.uses_cuda():
        confidence = 0.5
        basis += "; a no-op without CUDA, a cost as soon as this loop runs on a GPU"
    for trace in evidence.traces:
        alloc_us = sum(v["us"] for v in trace.allocator.values())
        if alloc_us > 0 and trace.steps:
            gain = trace_share(trace, alloc_us)
            basis = "Amdahl on the measured cudaMalloc/cudaFree time per step"
            items.append(Evidence("cudaMalloc/cudaFree share of step", gain, "fraction", "trace"))
            break
    return finding(
        "memory.empty_cache_in_loop",
        title=f"torch.cuda.empty_cache() is called {times(calls)} per step",
        confidence=confidence,
        gain=gain,
        basis=basis,
        evidence=items,
        fix=Fix(
            text="Delete torch.cuda.empty_cache() from the training loop.",
            snippet="for batch in loader:\n    ...\n    # torch.cuda.empty_cache()  # remove",
            knobs={"empty_cache": "off"},
        ),
    )


@rule("memory.fragmentation", risk="data-path")
def memory_fragmentation(evidence: RunEvidence) -> Finding | None:
    """What: the allocator reserves far more memory than tensors use, and keeps calling
    cudaMalloc/cudaFree in steady state.

    Why: fragmented caching-allocator segments cannot be reused for new sizes, so it grows and
    frees segments, each call synchronising the device.

    Fix: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, or preallocate fixed-size buffers.
    """
    reserved = evidence.values("torch.cuda_reserved")
    allocated = evidence.values("torch.cuda_allocated")
    ratio = None
    if reserved and allocated and statistics.median(allocated) > 0:
        ratio = statistics.median(reserved) / statistics.median(allocated)
    for trace in evidence.traces:
        calls = sum(v["count"] for v in trace.allocator.values())
        if not trace.steps or per_step(trace, calls) < ALLOC_CALLS_PER_STEP_MIN:
            continue
        if ratio is not None and ratio < RESERVED_OVER_ALLOCATED_MIN:
            continue
        share = trace_share(trace, sum(v["us"] for v in trace.allocator.values()))
        items = [
            Evidence("cudaMalloc/cudaFree per step", per_step(trace, calls), "calls", "trace"),
            Evidence("share of step time", share, "fraction", "trace"),
        ]
        if ratio is not None:
            items.append(Evidence("reserved / allocated", ratio, "ratio", "metrics"))
        return finding(
            "memory.fragmentation",
            title=f"cudaMalloc/cudaFree {times(round(per_step(trace, calls), 1))} per step",
            confidence=0.7 if ratio is not None else 0.5,
            gain=share,
            basis="Amdahl on the measured cudaMalloc/cudaFree time",
            evidence=items,
            fix=Fix(
                text="Let the allocator grow segments instead of fragmenting them.",
                snippet="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py",
                knobs={"expandable_segments": True},
            ),
        )
    return None
