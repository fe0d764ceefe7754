"""The `batch.*` rules."""

from __future__ import annotations

from perfweb_contract.knobs import KNOBS
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.signals import gpu_memory_total, peak_gpu_memory

LOW_UTILIZATION_PCT = 50.0  # GPU utilisation below this leaves room for a larger batch
MEMORY_HEADROOM_MAX = 0.5  # peak memory / device memory below this leaves room
LARGER_BATCH_RECOVERABLE = 0.3  # share of the GPU's idle time a 2x batch recovers (prior)
BATCH_SIZE_MAX = KNOBS["batch_size"].maximum  # samples: the most the knob may set


@rule("batch.increase", risk="operator")
def batch_increase(evidence: RunEvidence) -> Finding | None:
    """What: the GPU is mostly idle and most of its memory is unused.

    Why: small batches leave the GPU's parallelism unused and pay per-step fixed costs (launch,
    optimizer, synchronisation) more often per sample.

    Fix: raise the batch size (and the learning rate with it), or accumulate gradients.
    """
    utilization = evidence.values("gpu.utilization")
    total, peak = gpu_memory_total(evidence), peak_gpu_memory(evidence)
    if len(utilization) < 5 or total is None or peak is None:
        return None
    util = sorted(utilization)[len(utilization) // 2]
    headroom = peak / total
    if util >= LOW_UTILIZATION_PCT or headroom >= MEMORY_HEADROOM_MAX:
        return None
    return finding(
        "batch.increase",
        title=f"GPU {util:.0f}% busy using {headroom:.0%} of its memory",
        confidence=0.5,
        gain=(1 - util / 100) * LARGER_BATCH_RECOVERABLE,
        basis=f"{LARGER_BATCH_RECOVERABLE:.0%} of the GPU's idle share (prior for a 2x batch)",
        evidence=[
            Evidence("GPU utilisation (median)", util, "%", "metrics"),
            Evidence("peak memory / device memory", headroom, "fraction", "metrics"),
        ],
        fix=_larger_batch_fix(evidence),
    )


def _larger_batch_fix(evidence: RunEvidence) -> Fix:
    """Twice the DataLoader's recorded batch size; without one there is no value to try."""
    sizes = [d.get("batch_size") for d in evidence.dataloaders()]
    batch = next((b for b in sizes if isinstance(b, int) and not isinstance(b, bool)), None)
    if batch is None or batch < 1:
        return Fix(
            text="Double the batch size while memory allows; scale the learning rate. (The "
            "run recorded no DataLoader batch size, so there is no value to measure as a job.)",
            snippet="DataLoader(dataset, batch_size=2 * batch_size, ...)",
        )
    target = min(2 * batch, BATCH_SIZE_MAX)
    return Fix(
        text=f"Double the batch size from {batch} to {target} while memory allows; scale the "
        "learning rate.",
        snippet=f"DataLoader(dataset, batch_size={target}, ...)  # was {batch}",
        knobs={"batch_size": target},
    )
