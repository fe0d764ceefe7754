"""Findings that claim the same time share it: the gains shown together never exceed what the
trace shows.

Each finding recovers one kind of time: GPU idle time (the GPU waits on the host: data
loading, synchronisation, launches, copies), GPU busy computation (faster kernels), or exposed
communication. When the gains of one kind add up to more than that time (the idle share of
the step, the busy share, the exposed-communication share of the trace), each is scaled down
in proportion and its basis says with which findings it shares the time. Whatever the kinds,
the gains of one run never add up to more than the whole step.
"""

from __future__ import annotations

from perfweb_recommender.analysis.summary import TraceSummary
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Finding

IDLE = "GPU idle"
BUSY = "GPU busy computation"
COMMUNICATION = "exposed communication"
CLAIMS = {
    "dataloader.num_workers": IDLE,
    "dataloader.persistent_workers": IDLE,
    "dataloader.pin_memory": IDLE,
    "dataloader.too_many_workers": IDLE,
    "copy.synchronous_h2d": IDLE,
    "sync.host_device": IDLE,
    "launch.overhead": IDLE,
    "cpu.bound": IDLE,
    "cpu.thread_oversubscription": IDLE,
    "cpu.threads_too_few": IDLE,
    "memory.empty_cache_in_loop": IDLE,
    "memory.fragmentation": IDLE,
    "batch.increase": IDLE,
    "dataloader.io_wait": IDLE,
    "dataloader.cpu_bound": IDLE,
    "distributed.no_sync": COMMUNICATION,
    "precision.amp": BUSY,
    "precision.tf32": BUSY,
    "attention.fused": BUSY,
    "fusion.elementwise": BUSY,
    "cudnn.benchmark": BUSY,
    "inference.compile_runtime": BUSY,
    "distributed.comm_bound": COMMUNICATION,
    "distributed.grad_accumulation": COMMUNICATION,
    "distributed.reduce_then_broadcast": COMMUNICATION,
    "distributed.backend": COMMUNICATION,
}
WHOLE_STEP = 1.0


def available_time(evidence: RunEvidence) -> dict[str, float]:
    """The share of step time of each kind the traces show (the largest over the ranks);
    empty without a GPU trace (then only the whole step bounds the gains)."""
    shares: dict[str, float] = {}
    for trace in evidence.traces:
        if not trace.launch.get("kernels"):
            continue
        idle = _idle_share(trace)
        span = trace.temporal.kernel_span_us
        comm = trace.kernel_breakdown.get("COMMUNICATION", {}).get("us", 0.0)
        for kind, share in (
            (IDLE, idle),
            (BUSY, 1.0 - idle),
            (COMMUNICATION, comm / span if span else 0.0),
        ):
            shares[kind] = max(shares.get(kind, 0.0), share)
    return shares


def _idle_share(trace: TraceSummary) -> float:
    """The GPU idle share the trace shows: the largest of the idle share of the first-to-last
    kernel span, of the GPU-side ProfilerSteps, and of the mean CPU-side step (the GPU is idle
    while the host prepares a step before its first kernel)."""
    t = trace.temporal
    if not t.kernel_span_us:
        return 0.0
    shares = [t.idle_us / t.kernel_span_us]
    if trace.step_timeline:
        shares.append(trace.step_timeline["idle_pct"] / 100.0)
    if trace.steps and trace.mean_step_us:
        busy_per_step = (t.kernel_span_us - t.idle_us) / len(trace.steps)
        shares.append(1.0 - busy_per_step / trace.mean_step_us)
    return min(1.0, max(0.0, *shares))


def share_overlapping_gains(findings: list[Finding], evidence: RunEvidence) -> None:
    """Scale the estimated gains (in place) so that each kind of time, and the whole step,
    is claimed at most once. Verified findings (measured by a job) keep their measurement."""
    available = available_time(evidence)
    for kind, cap in available.items():
        _scale([f for f in _estimated(findings) if CLAIMS.get(f.id) == kind], cap, kind)
    _scale(_estimated(findings), WHOLE_STEP, "step time")


def _estimated(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.measured_gain is None and f.estimated_gain > 0]


def _scale(group: list[Finding], cap: float, kind: str) -> None:
    claimed = sum(f.estimated_gain for f in group)
    if claimed <= cap or claimed <= 0:
        return
    factor = cap / claimed
    for found in group:
        others = ", ".join(f.id for f in group if f is not found)
        found.estimated_gain *= factor
        found.gain_basis += (
            f"; shares the trace's {cap:.0%} {kind} with {others} (x{factor:.2f})"
            if others
            else f"; capped at the trace's {cap:.0%} {kind}"
        )
