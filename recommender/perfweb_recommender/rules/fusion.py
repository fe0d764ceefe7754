"""Operator rules about kernel fusion: eager elementwise chains a compiler would fuse."""

from __future__ import annotations

from perfweb_recommender.analysis.summary import TraceSummary
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule

FUSIBLE_SHARE_MIN = 0.4  # elementwise + normalisation + concat, fraction of kernel time
FUSION_SAVING = 0.5  # prior: share of that time fusion removes (fewer round trips to memory)
CONCAT_SHARE_MIN = 0.02  # concat share of kernel time that points at a growing KV cache
MIN_GAIN = 0.01  # below 1% of step time (a mostly idle GPU) the advice is noise
FAMILIES = ("elementwise", "normalisation", "concat")


def _fusible(trace: TraceSummary) -> tuple[float, dict[str, float]]:
    shares = {f: trace.tensor_cores.get(f"{f}_share", 0.0) for f in FAMILIES}
    return sum(shares.values()), shares


def _busy_share(trace: TraceSummary) -> float:
    t = trace.temporal
    return 1 - t.idle_us / t.kernel_span_us if t.kernel_span_us else 0.0


@rule("fusion.elementwise", risk="operator")
def fusion_elementwise(evidence: RunEvidence) -> Finding | None:
    """What: elementwise, normalisation and concatenation kernels take most of the GPU time,
    as in an eager decode step.

    Why: each eager operator reads its inputs from GPU memory and writes its output back; a
    chain of small elementwise kernels is bound by memory traffic and launches, not by math.
    A decode step that concatenates its KV cache copies the whole cache every token.

    Fix: `torch.compile` (fuses the chains into a few kernels), a static (preallocated) KV
    cache instead of concatenation, or fused kernels (fused RMSNorm, rotary embeddings, SDPA).
    """
    best: tuple[float, float, dict[str, float], TraceSummary] | None = None
    for trace in evidence.traces:
        if trace.compiled or not trace.launch.get("kernels"):
            continue
        total, shares = _fusible(trace)
        if total >= FUSIBLE_SHARE_MIN and (best is None or total > best[0]):
            best = (total, _busy_share(trace) * total, shares, trace)
    if best is None:
        return None
    total, step_share, shares, trace = best
    if step_share * FUSION_SAVING < MIN_GAIN:
        return None
    items = [
        Evidence(f"{family} share of kernel time", share, "fraction", f"trace rank {trace.rank}")
        for family, share in shares.items()
    ]
    items.append(Evidence("compiled regions", 0, "regions", "trace"))
    kv_cache = shares["concat"] >= CONCAT_SHARE_MIN
    return finding(
        "fusion.elementwise",
        title=f"Eager elementwise/normalisation/concat kernels take {total:.0%} of kernel time",
        confidence=0.5,
        gain=step_share * FUSION_SAVING,
        basis=f"their share of the kernel span ({step_share:.1%}: busy share x their share of "
        f"kernel time) x {FUSION_SAVING:.0%} (prior: memory traffic fusion removes)",
        evidence=items,
        fix=Fix(
            text="Fuse the elementwise chains with torch.compile"
            + (
                "; preallocate the KV cache instead of concatenating it every token"
                if kv_cache
                else ""
            )
            + "; use fused kernels (RMSNorm, rotary, SDPA) where the model offers them.",
            snippet="model = torch.compile(model)\n"
            + (
                '# Hugging Face generate: model.generate(..., cache_implementation="static")'
                if kv_cache
                else "# fused norms/activations: the model's fused-kernel options"
            ),
            knobs={"compile": "default"},
        ),
    )
