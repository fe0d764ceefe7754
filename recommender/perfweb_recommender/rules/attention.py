"""The `attention.*` rules."""

from __future__ import annotations

from perfweb_recommender.analysis.summary import TraceSummary
from perfweb_recommender.evidence import Replayed, RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.replayed import replay_estimate
from perfweb_recommender.rules.signals import gpu_busy_share

ATTENTION_SHARE_MIN = 0.1  # softmax + batched GEMM share of kernel time (or CPU step time)
FUSED_ATTENTION_GAIN = 0.5  # share of that time a fused attention kernel saves
CPU_PATTERNS_MIN = 1.0  # bmm -> softmax -> bmm triples per profiled step on the CPU
CPU_SDPA_SPEEDUP = 1.7  # prior: SDPA vs the hand-written form on a 2-core CPU (1.35-2.2x)
SDPA_OPS = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention")


@rule("attention.fused", risk="operator")
def attention_fused(evidence: RunEvidence) -> Finding | None:
    """What: hand-written attention (matmul -> softmax -> matmul) takes much of the GPU time.

    Why: the unfused form writes the full attention matrix to memory and reads it back; fused
    Flash / memory-efficient kernels never materialise it.

    On a CPU-only trace the same pattern is read from the CPU operators: batched matmul,
    softmax, batched matmul in a row, and their share of the profiled steps' time.

    Fix: `torch.nn.functional.scaled_dot_product_attention(q, k, v)`.
    """
    replayed = evidence.replays.get("attention")
    if replayed is not None and replayed.share >= ATTENTION_SHARE_MIN:
        return _replayed_attention(replayed)
    for trace in evidence.traces:
        if not trace.launch.get("kernels") and trace.cpu_attention:
            found = _cpu_attention(trace)
            if found is not None:
                return found
            continue
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


def _cpu_attention(trace: TraceSummary) -> Finding | None:
    """attention.fused from a CPU-only trace's operators (analysis.cpu_attention)."""
    if any(trace.markers.get(op) for op in SDPA_OPS):
        return None
    row = trace.cpu_attention
    patterns, share = row.get("patterns", 0.0), row.get("share", 0.0)
    if patterns < CPU_PATTERNS_MIN or share < ATTENTION_SHARE_MIN:
        return None
    saved = 1 - 1 / CPU_SDPA_SPEEDUP
    return finding(
        "attention.fused",
        title=f"Attention by hand (matmul -> softmax -> matmul) takes {share:.0%} of the "
        "CPU step time",
        confidence=0.6,
        gain=share * saved,
        basis=f"measured share of the profiled steps in bmm/softmax ({share:.1%}, trace) x "
        f"(1 - 1/{CPU_SDPA_SPEEDUP:g}): SDPA's speed-up on a 2-core CPU, a prior",
        evidence=[
            Evidence(
                "bmm + softmax share of the step", share, "fraction", f"trace rank {trace.rank}"
            ),
            Evidence("bmm -> softmax -> bmm per step", patterns, "calls", "trace"),
            Evidence("bmm + softmax CPU time per step", row.get("us", 0.0), "µs", "trace"),
        ],
        fix=Fix(
            text="Compute the attention with PyTorch's fused operator (same result; it never "
            "materialises the full attention matrix).",
            snippet="from torch.nn.functional import scaled_dot_product_attention\n"
            "# replaces softmax(q @ k.transpose(-2, -1) / sqrt(d)) @ v\n"
            "out = scaled_dot_product_attention(q, k, v)",
        ),
    )


def _replayed_attention(replayed: Replayed) -> Finding:
    """attention.fused from the replay of the run's own q, k, v shapes (CPU traces: the
    replay plan finds matmul -> softmax -> matmul among the top-level operators)."""
    estimate = replay_estimate(
        replayed,
        current="attention by hand",
        fix="scaled_dot_product_attention",
        acts_on="the hand-written attention",
    )
    if estimate.slower:
        return finding(
            "attention.fused",
            title=f"Checked: scaled_dot_product_attention is {replayed.ratio:.2f}x slower than "
            "the hand-written attention for this run's shapes on this host",
            confidence=0.8,
            gain=0.0,
            basis=estimate.basis,
            evidence=estimate.evidence,
            fix=Fix(
                text="Not recommended: the replay of the run's own shapes measured it "
                "slower on this host."
            ),
        )
    return finding(
        "attention.fused",
        title=f"Attention by hand (matmul -> softmax -> matmul) takes {replayed.share:.0%} of "
        "the traced time",
        confidence=0.8,
        gain=estimate.gain,
        basis=estimate.basis,
        evidence=estimate.evidence,
        fix=Fix(
            text="Compute the attention with PyTorch's fused operator (same result; it never "
            "materialises the full attention matrix).",
            snippet="from torch.nn.functional import scaled_dot_product_attention\n"
            "# replaces softmax(q @ k.transpose(-2, -1) / sqrt(d)) @ v\n"
            "out = scaled_dot_product_attention(q, k, v)",
        ),
    )
