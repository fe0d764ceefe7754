"""The `attention.*` rules."""

from __future__ import annotations

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.signals import gpu_busy_share

ATTENTION_SHARE_MIN = 0.1  # softmax + batched GEMM share of kernel time
FUSED_ATTENTION_GAIN = 0.5  # share of that time a fused attention kernel saves


@rule("attention.fused", risk="operator")
def attention_fused(evidence: RunEvidence) -> Finding | None:
    """What: hand-written attention (matmul -> softmax -> matmul) takes much of the GPU time.

    Why: the unfused form writes the full attention matrix to memory and reads it back; fused
    Flash / memory-efficient kernels never materialise it.

    Fix: `torch.nn.functional.scaled_dot_product_attention(q, k, v)`.
    """
    for trace in evidence.traces:
        markers = trace.markers
        if any("scaled_dot_product" in m for m in markers):
            continue
        if not (markers.get("aten::bmm") or markers.get("aten::baddbmm")):
            continue
        if not (markers.get("aten::softmax") or markers.get("aten::_softmax")):
            continue
        share = trace.tensor_cores.get("softmax_bmm_share", 0.0)
        if share < ATTENTION_SHARE_MIN:
            continue
        step_share = gpu_busy_share(trace) * share
        return finding(
            "attention.fused",
            title=f"Unfused attention (bmm + softmax) takes {share:.0%} of kernel time",
            confidence=0.4,
            gain=step_share * FUSED_ATTENTION_GAIN,
            basis=f"softmax/batched-GEMM share of step x {FUSED_ATTENTION_GAIN:.0%}",
            evidence=[
                Evidence("softmax + batched GEMM share of kernel time", share, "fraction", "trace"),
                Evidence("aten::bmm calls", markers.get("aten::bmm", 0), "calls", "trace"),
            ],
            fix=Fix(
                text="Use PyTorch's fused attention.",
                snippet="from torch.nn.functional import scaled_dot_product_attention\n"
                "out = scaled_dot_product_attention(q, k, v, is_causal=True)",
            ),
        )
    return None
