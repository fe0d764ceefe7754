"""The `precision.*` rules."""

from __future__ import annotations

from perfweb_recommender.analysis.summary import TraceSummary
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.inference import is_inference
from perfweb_recommender.rules.signals import compute_capability, gpu_busy_share

DENSE_MATH_SHARE_MIN = 0.2  # GEMM/conv share of kernel time worth speeding up
FP32_SIMT_SHARE_MIN = 0.5  # share of dense math in fp32 on CUDA cores
TENSOR_CORE_SHARE_MAX = 0.1  # share of dense math already on tensor cores
TENSOR_CORE_SPEEDUP = 2.0  # conservative speed-up of dense math on tensor cores
INFERENCE_AMP_PRIOR = 0.5  # share of fp32 Linear/conv time tensor cores recover (prior)


def _fp32_dense(trace: TraceSummary) -> float | None:
    """Share of step time in fp32 CUDA-core GEMM/conv kernels, when that is the pattern."""
    tc = trace.tensor_cores
    if tc.get("dense_math_share", 0) < DENSE_MATH_SHARE_MIN:
        return None
    if tc.get("fp32_simt_share", 0) < FP32_SIMT_SHARE_MIN:
        return None
    if tc.get("tensor_core_share", 0) > TENSOR_CORE_SHARE_MAX:
        return None
    return gpu_busy_share(trace) * tc["dense_math_share"] * tc["fp32_simt_share"]


@rule("precision.amp", risk="operator")
def precision_amp(evidence: RunEvidence) -> Finding | None:
    """What: GEMMs and convolutions run in fp32 on CUDA cores; no tensor-core kernels.

    Why: since Volta (compute capability 7.0) tensor cores run fp16/bf16 matrix math several
    times faster than fp32 CUDA cores, and halve activation memory traffic.

    Fix: wrap the forward pass in `torch.autocast` (bf16; or fp16 with a GradScaler).
    """
    capability = compute_capability(evidence)
    if capability is None or capability < (7, 0) or evidence.fact("amp.autocast") is True:
        return None
    for trace in evidence.traces:
        share = _fp32_dense(trace)
        if share is None:
            continue
        tc = trace.tensor_cores
        return finding(
            "precision.amp",
            title=f"{tc['fp32_simt_share']:.0%} of matrix math runs in fp32 without tensor cores",
            confidence=0.6,
            gain=share * (1 - 1 / TENSOR_CORE_SPEEDUP),
            basis=f"fp32 GEMM/conv share of step ({share:.1%}) x (1 - 1/{TENSOR_CORE_SPEEDUP:g})",
            evidence=[
                Evidence(
                    "GEMM/conv share of kernel time", tc["dense_math_share"], "fraction", "trace"
                ),
                Evidence("of which fp32 CUDA-core", tc["fp32_simt_share"], "fraction", "trace"),
                Evidence(
                    "compute capability", f"{capability[0]}.{capability[1]}", "", "facts/trace"
                ),
            ],
            fix=Fix(
                text="Run the forward pass under autocast (bf16 needs no GradScaler).",
                snippet='with torch.autocast("cuda", dtype=torch.bfloat16):\n'
                "    loss = model(x).loss",
                knobs={"amp": "bf16"},
            ),
        )
    return _fp32_gpu_inference(evidence, capability)


def _fp32_gpu_inference(evidence: RunEvidence, capability: tuple[int, int]) -> Finding | None:
    """Without a GPU trace: inference of an fp32 Linear/conv model on a tensor-core GPU."""
    if any(t.launch.get("kernels") for t in evidence.traces) or not is_inference(evidence):
        return None
    dense = float(evidence.fact("model.linear_param_share", 0.0)) + float(
        evidence.fact("model.conv_param_share", 0.0)
    )
    if evidence.fact("model.dtype") != "float32" or dense < 0.5:
        return None
    bf16 = capability >= (8, 0)
    dtype = "bfloat16" if bf16 else "float16"
    return finding(
        "precision.amp",
        title=f"fp32 inference on a GPU with {dtype} tensor cores "
        f"(compute capability {capability[0]}.{capability[1]})",
        confidence=0.4,
        gain=min(1.0, dense) * INFERENCE_AMP_PRIOR,
        basis=f"prior: {INFERENCE_AMP_PRIOR:.0%} of the Linear/conv time (their parameter share "
        f"{dense:.0%} as a proxy; no GPU trace to measure kernel time)",
        evidence=[
            Evidence("model dtype", "float32", "", "facts"),
            Evidence("parameters in Linear and convolution layers", dense, "fraction", "facts"),
            Evidence("compute capability", f"{capability[0]}.{capability[1]}", "", "facts"),
            Evidence("autocast", False, "flag", "facts"),
        ],
        fix=Fix(
            text=f"Serve under {dtype} autocast (no GradScaler at inference); check output "
            "agreement before deploying.",
            snippet=f'with torch.inference_mode(), torch.autocast("cuda", dtype=torch.{dtype}):\n'
            "    output = model(batch)",
            knobs={"amp": "bf16"} if bf16 else {},
        ),
    )


@rule("precision.tf32", risk="operator")
def precision_tf32(evidence: RunEvidence) -> Finding | None:
    """What: fp32 matrix math on an Ampere-or-newer GPU with TF32 disabled.

    Why: TF32 tensor cores run fp32 matmuls up to 8x faster with a 10-bit mantissa, which is
    enough for training almost every network.

    Fix: `torch.set_float32_matmul_precision("high")`.
    """
    capability = compute_capability(evidence)
    if capability is None or capability < (8, 0):
        return None
    precision = evidence.fact("torch.float32_matmul_precision")
    if precision != "highest" or evidence.fact("cuda.matmul.allow_tf32") is True:
        return None
    shares = [s for s in (_fp32_dense(t) for t in evidence.traces) if s is not None]
    gain = max(shares) * (1 - 1 / TENSOR_CORE_SPEEDUP) if shares else 0.1
    return finding(
        "precision.tf32",
        title="fp32 matmuls on an Ampere+ GPU with TF32 off",
        confidence=0.7 if shares else 0.5,
        gain=gain,
        basis="fp32 GEMM/conv share x (1 - 1/2)" if shares else "prior: 10% (no trace)",
        evidence=[
            Evidence("float32_matmul_precision", precision, "", "facts"),
            Evidence("compute capability", f"{capability[0]}.{capability[1]}", "", "facts/trace"),
        ],
        fix=Fix(
            text="Allow TF32 tensor cores for fp32 matmuls.",
            snippet='torch.set_float32_matmul_precision("high")',
            knobs={"tf32": True},
        ),
    )


@rule("precision.scaler_misuse", risk="operator")
def precision_scaler_misuse(evidence: RunEvidence) -> Finding | None:
    """What: fp16 autocast without a GradScaler, or `scaler.step()` without `scaler.update()`.

    Why: fp16 gradients underflow to zero without loss scaling; a scaler that never updates
    keeps a stale scale, skipping steps or underflowing. Training silently degrades.

    A GradScaler built with `enabled=False` counts as none. Both cases are critical: the run
    trains wrong without failing.

    Fix: scale -> backward -> step -> update, every step.
    """
    items: list[Evidence] = []
    if evidence.fact("amp.scaler_step_without_update") is True:
        items.append(Evidence("scaler.step without scaler.update", True, "flag", "facts"))
    dtype = str(evidence.fact("amp.autocast_dtype", ""))
    scaler_works = (
        evidence.fact("amp.grad_scaler") is True
        and evidence.fact("amp.grad_scaler_enabled") is not False
    )
    if (
        "float16" in dtype
        and "bfloat16" not in dtype
        and evidence.fact("training.backward") is True
        and not scaler_works
    ):
        label = (
            "fp16 autocast with GradScaler(enabled=False)"
            if evidence.fact("amp.grad_scaler_enabled") is False
            else "fp16 autocast without GradScaler"
        )
        items.append(Evidence(label, dtype, "", "facts"))
    if not items:
        return None
    return finding(
        "precision.scaler_misuse",
        title="fp16 mixed precision without a working GradScaler",
        confidence=0.8,
        gain=0.0,
        basis="correctness, not speed: no time estimate (critical)",
        critical=True,
        evidence=items,
        fix=Fix(
            text="Use GradScaler in the order scale, backward, step, update.",
            snippet="scaler = torch.amp.GradScaler()\nscaler.scale(loss).backward()\n"
            "scaler.step(optimizer)\nscaler.update()",
        ),
    )
