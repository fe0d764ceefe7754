"""The `sync.*` rules."""

from __future__ import annotations

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule, times
from perfweb_recommender.rules.signals import per_step, trace_share

SYNCS_PER_STEP_MIN = 1.0  # blocking synchronisations per step
SYNC_PRIOR_GAIN = 0.05  # facts only: per-step syncs typically cost a few percent


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
