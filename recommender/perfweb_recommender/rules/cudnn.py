"""The `cudnn.*` rules."""

from __future__ import annotations

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.inference import is_inference
from perfweb_recommender.rules.inference_model import CONV_PARAM_SHARE_MIN
from perfweb_recommender.rules.signals import gpu_busy_share

CONV_SHARE_MIN = 0.2  # convolution share of kernel time
CUDNN_AUTOTUNE_GAIN = 0.2  # typical share of conv time cudnn.benchmark saves


@rule("cudnn.benchmark", risk="operator")
def cudnn_benchmark(evidence: RunEvidence) -> Finding | None:
    """What: a convolution-heavy model runs with `cudnn.benchmark=False`.

    Why: with fixed input shapes, cuDNN's autotuner picks the fastest convolution algorithm
    once; without it a heuristic choice can be much slower.

    Fix: `torch.backends.cudnn.benchmark = True` (when input shapes do not change every step).
    """
    if evidence.fact("cudnn.benchmark") is not False or not evidence.uses_cuda():
        return None  # cuDNN runs only on CUDA: the flag means nothing to a CPU run
    for trace in evidence.traces:
        conv = trace.tensor_cores.get("conv_share", 0.0)
        if conv < CONV_SHARE_MIN:
            continue
        share = gpu_busy_share(trace) * conv
        return finding(
            "cudnn.benchmark",
            title=f"Convolutions take {conv:.0%} of GPU kernel time without cuDNN autotuning",
            confidence=0.5,
            gain=share * CUDNN_AUTOTUNE_GAIN,
            basis=f"conv share of step ({share:.1%}) x {CUDNN_AUTOTUNE_GAIN:.0%} typical saving",
            evidence=[
                Evidence("convolution share of kernel time", conv, "fraction", "trace"),
                Evidence("cudnn.benchmark", False, "flag", "facts"),
            ],
            fix=Fix(
                text="Let cuDNN benchmark its convolution algorithms once per input shape.",
                snippet="torch.backends.cudnn.benchmark = True",
                knobs={"cudnn_benchmark": True},
            ),
        )
    return _fixed_shape_conv_inference(evidence)


def _fixed_shape_conv_inference(evidence: RunEvidence) -> Finding | None:
    """Without a GPU trace: a conv net served on CUDA with one input shape in every call."""
    conv = evidence.fact("model.conv_param_share")
    if any(t.launch.get("kernels") for t in evidence.traces) or not is_inference(evidence):
        return None
    if not isinstance(conv, (int, float)) or conv < CONV_PARAM_SHARE_MIN:
        return None
    if evidence.fact("inference.input_shapes") != "fixed":
        return None  # varying shapes re-tune per shape: the autotuner may cost more than it saves
    return finding(
        "cudnn.benchmark",
        title=f"Conv net ({conv:.0%} of parameters in convolutions) served on CUDA with fixed "
        "input shapes and no cuDNN autotuning",
        confidence=0.4,
        gain=float(conv) * CUDNN_AUTOTUNE_GAIN,
        basis=f"prior: {CUDNN_AUTOTUNE_GAIN:.0%} of the convolution time (their parameter share "
        f"{conv:.0%} as a proxy; no GPU trace to measure it)",
        evidence=[
            Evidence("parameters in convolutions", float(conv), "fraction", "facts"),
            Evidence("input shapes of the model's calls", "fixed", "", "facts"),
            Evidence("cudnn.benchmark", False, "flag", "facts"),
        ],
        fix=Fix(
            text="Let cuDNN benchmark its convolution algorithms once for the fixed shape.",
            snippet="torch.backends.cudnn.benchmark = True",
            knobs={"cudnn_benchmark": True},
        ),
    )
