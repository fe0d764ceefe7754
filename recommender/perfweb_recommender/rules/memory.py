"""Operator rules about GPU memory: room for a larger batch, and the risk of running out."""

from __future__ import annotations

import statistics

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule, times
from perfweb_recommender.rules.signals import (
    gpu_memory_total,
    peak_gpu_memory,
    per_step,
    trace_share,
)

OOM_RISK_SHARE = 0.9  # peak memory / device memory above this risks OOM


@rule("memory.oom_risk", risk="operator")
def memory_oom_risk(evidence: RunEvidence) -> Finding | None:
    """What: peak GPU memory above 90% of the device.

    Why: a slightly longer sequence or a fragmented allocator then ends the run with an
    out-of-memory error.

    Fix: activation checkpointing, autocast (halves activations) or a smaller micro-batch
    with gradient accumulation.
    """
    total, peak = gpu_memory_total(evidence), peak_gpu_memory(evidence)
    if total is None or peak is None or peak / total < OOM_RISK_SHARE:
        return None
    return finding(
        "memory.oom_risk",
        title=f"Peak GPU memory at {peak / total:.0%} of the device",
        confidence=0.8,
        gain=0.0,
        basis="risk of failure, not speed: no time estimate",
        evidence=[Evidence("peak memory / device memory", peak / total, "fraction", "metrics")],
        fix=Fix(
            text="Reduce activation memory.",
            snippet="from torch.utils.checkpoint import checkpoint\n"
            "y = checkpoint(block, x, use_reentrant=False)",
        ),
    )


EMPTY_CACHE_PER_STEP_MIN = 1.0  # torch.cuda.empty_cache() calls per step
EMPTY_CACHE_PRIOR_GAIN = 0.10  # no trace: cudaFree + re-cudaMalloc of the cache every step
ALLOC_CALLS_PER_STEP_MIN = 1.0  # cudaMalloc/cudaFree per steady step
RESERVED_OVER_ALLOCATED_MIN = 1.5  # reserved / allocated bytes, median over the run


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
