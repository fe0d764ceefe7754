"""Achieved FLOP/s and model FLOP utilisation (MFU) of a run's steps.

The agent counts the FLOPs of one step once per run (`flops.per_step`, torch's
FlopCounterMode: matmuls, convolutions, attention; agent/perfweb_agent/runtime/flops.py). Achieved
FLOP/s is that over the median steady step; MFU is achieved over the device's peak for the run's
compute dtype: on a GPU from PEAKS (dense, no sparsity; each row's source beside it), on a
CPU the peak the agent measured on the run's host with a float32 matmul probe at the run's
thread count (`cpu.peak_flops`). Absent, with the reason, when any of these is unknown.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from typing import Any

from perfweb_recommender.evidence import RunEvidence

TFLOPS = 1e12
# GPU model -> dtype -> dense peak FLOP/s (tensor cores where the dtype has them).
# fmt: off
PEAKS: dict[str, dict[str, float]] = {
    # NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100), dense figures (half the sparse)
    "H100 SXM": {"fp64": 67 * TFLOPS, "fp32": 67 * TFLOPS, "tf32": 494.5 * TFLOPS,
                 "bf16": 989.5 * TFLOPS, "fp16": 989.5 * TFLOPS, "fp8": 1979 * TFLOPS},
    "H100 PCIe": {"fp64": 51 * TFLOPS, "fp32": 51 * TFLOPS, "tf32": 378 * TFLOPS,
                  "bf16": 756.5 * TFLOPS, "fp16": 756.5 * TFLOPS, "fp8": 1513 * TFLOPS},
    # NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): SXM as H100 SXM; NVL (PCIe)
    "H200 SXM": {"fp64": 67 * TFLOPS, "fp32": 67 * TFLOPS, "tf32": 494.5 * TFLOPS,
                 "bf16": 989.5 * TFLOPS, "fp16": 989.5 * TFLOPS, "fp8": 1979 * TFLOPS},
    "H200 NVL": {"fp64": 60 * TFLOPS, "fp32": 60 * TFLOPS, "tf32": 417.5 * TFLOPS,
                 "bf16": 835.5 * TFLOPS, "fp16": 835.5 * TFLOPS, "fp8": 1670 * TFLOPS},
    # NVIDIA B200 (DGX B200 datasheet, per GPU: 4.5 PF sparse FP16/BF16, 2.2 PF sparse TF32)
    "B200": {"fp32": 75 * TFLOPS, "tf32": 1100 * TFLOPS, "bf16": 2250 * TFLOPS,
             "fp16": 2250 * TFLOPS, "fp8": 4500 * TFLOPS},
    # NVIDIA A100 datasheet (nvidia.com/en-us/data-center/a100): SXM and PCIe alike
    "A100": {"fp64": 19.5 * TFLOPS, "fp32": 19.5 * TFLOPS, "tf32": 156 * TFLOPS,
             "bf16": 312 * TFLOPS, "fp16": 312 * TFLOPS},
    # NVIDIA L40S datasheet (dense: half the sparse 733 / 366 TFLOPS)
    "L40S": {"fp32": 91.6 * TFLOPS, "tf32": 183 * TFLOPS, "bf16": 362 * TFLOPS,
             "fp16": 362 * TFLOPS, "fp8": 733 * TFLOPS},
    # NVIDIA L4 datasheet (dense: half the sparse 242 / 120 TFLOPS)
    "L4": {"fp32": 30.3 * TFLOPS, "tf32": 60 * TFLOPS, "bf16": 121 * TFLOPS,
           "fp16": 121 * TFLOPS, "fp8": 242 * TFLOPS},
    # NVIDIA A10 datasheet (dense)
    "A10": {"fp32": 31.2 * TFLOPS, "tf32": 62.5 * TFLOPS, "bf16": 125 * TFLOPS,
            "fp16": 125 * TFLOPS},
    # NVIDIA T4 datasheet (fp16 tensor cores; no bf16)
    "T4": {"fp32": 8.1 * TFLOPS, "fp16": 65 * TFLOPS},
    # NVIDIA V100 datasheet: SXM2 and PCIe (fp16 tensor cores; no bf16, no tf32)
    "V100 SXM": {"fp64": 7.8 * TFLOPS, "fp32": 15.7 * TFLOPS, "fp16": 125 * TFLOPS},
    "V100 PCIe": {"fp64": 7 * TFLOPS, "fp32": 14 * TFLOPS, "fp16": 112 * TFLOPS},
    # AMD Instinct MI300X datasheet (amd.com), dense matrix figures
    "MI300X": {"fp64": 163.4 * TFLOPS, "fp32": 163.4 * TFLOPS, "tf32": 653.7 * TFLOPS,
               "bf16": 1307.4 * TFLOPS, "fp16": 1307.4 * TFLOPS, "fp8": 2614.9 * TFLOPS},
}
# fmt: on
# A device name as NVML / ROCm report it -> its row in PEAKS, first match wins.
MODELS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.I), model)
    for pattern, model in (
        (r"H100.*(PCIe|NVL)", "H100 PCIe"),
        (r"H100", "H100 SXM"),
        (r"H200.*NVL", "H200 NVL"),
        (r"H200", "H200 SXM"),
        (r"B200", "B200"),
        (r"A100", "A100"),
        (r"L40S", "L40S"),
        (r"\bL4\b", "L4"),
        (r"\bA10G?\b", "A10"),
        (r"\bT4\b", "T4"),
        (r"V100.*PCIe", "V100 PCIe"),
        (r"V100", "V100 SXM"),
        (r"MI300X", "MI300X"),
    )
)
DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "float64": "fp64",
    "double": "fp64",
}


@dataclass(frozen=True)
class Utilisation:
    """A run's achieved FLOP/s and MFU, or why they are absent (`reason`)."""

    flops_per_step: float | None = None
    median_step_s: float | None = None
    achieved_flops: float | None = None  # FLOP/s
    peak_flops: float | None = None
    peak_source: str = ""  # "H100 SXM bf16 (datasheet)", "measured: 2-thread fp32 matmul"
    dtype: str = ""
    reason: str = ""  # why MFU is absent ("" when it is known)

    @property
    def mfu(self) -> float | None:
        """Achieved over peak, None when either is unknown."""
        if self.achieved_flops is None or not self.peak_flops:
            return None
        return self.achieved_flops / self.peak_flops

    def as_json(self) -> dict[str, Any]:
        """JSON form (the CLI's `run.compute`, the run header)."""
        return {
            "flops_per_step": self.flops_per_step,
            "median_step_s": self.median_step_s,
            "achieved_flops": self.achieved_flops,
            "peak_flops": self.peak_flops,
            "peak_source": self.peak_source,
            "dtype": self.dtype,
            "mfu": self.mfu,
            "reason": self.reason,
        }

    def text(self) -> str:
        """ "MFU 62.0%: 8.45 of 13.6 GFLOP/s (...)" or why it is absent."""
        if self.mfu is None or self.achieved_flops is None or self.peak_flops is None:
            return f"MFU not known: {self.reason}"
        return (
            f"MFU {self.mfu:.1%}: {rate(self.achieved_flops)} of {rate(self.peak_flops)} "
            f"({self.peak_source})"
        )


def rate(flops_per_s: float) -> str:
    """ "9.45 GFLOP/s", "312 TFLOP/s"."""
    for unit, scale in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6)):
        if flops_per_s >= scale:
            return f"{flops_per_s / scale:.3g} {unit}"
    return f"{flops_per_s:.3g} FLOP/s"


def gpu_model(name: str) -> str | None:
    """The PEAKS row of a device name ("NVIDIA H100 80GB HBM3" -> "H100 SXM")."""
    for pattern, model in MODELS:
        if pattern.search(name):
            return model
    return None


def compute_dtype(evidence: RunEvidence, *, on_gpu: bool) -> str:
    """The dtype the run's matmuls run in: autocast's, else the model's (fp32 on a GPU with
    TF32 allowed counts as tf32)."""
    if evidence.fact("amp.autocast"):
        dtype = str(evidence.fact("amp.autocast_dtype", "")).removeprefix("torch.")
        if dtype in DTYPES:
            return DTYPES[dtype]
    dtype = DTYPES.get(str(evidence.fact("model.dtype", "float32")), "fp32")
    tf32 = evidence.fact("cuda.matmul.allow_tf32") or evidence.fact(
        "torch.float32_matmul_precision"
    ) in ("high", "medium")
    return "tf32" if on_gpu and dtype == "fp32" and tf32 else dtype


def utilisation(evidence: RunEvidence, *, step_s: float | None = None) -> Utilisation:
    """The run's achieved FLOP/s and MFU (see the module docstring); `step_s` instead of
    the median steady step (the last minute's median, on /metrics)."""
    flops = evidence.fact("flops.per_step")
    step = step_s if step_s is not None else evidence.median_step_s()
    if not flops or not step:
        why = "no step's FLOPs were counted" if not flops else "no steps timed"
        if evidence.fact("flops.error"):
            why += f" ({evidence.fact('flops.error')})"
        return Utilisation(flops_per_step=flops or None, median_step_s=step, reason=why)
    achieved = float(flops) / step
    base = Utilisation(flops_per_step=float(flops), median_step_s=step, achieved_flops=achieved)
    peak, source, dtype, reason = device_peak(evidence)
    return _with(base, dtype=dtype, peak_flops=peak, peak_source=source, reason=reason)


def device_peak(evidence: RunEvidence) -> tuple[float | None, str, str, str]:
    """(peak FLOP/s, its source, the compute dtype, why it is unknown) of the run's device."""
    on_gpu = evidence.uses_cuda()
    dtype = compute_dtype(evidence, on_gpu=on_gpu)
    if not on_gpu:
        peak = evidence.fact("cpu.peak_flops")
        if not peak:
            return None, "", dtype, "the CPU's peak was not measured"
        threads = evidence.fact("cpu.peak_threads", "?")
        return float(peak), _cpu_peak_source(evidence, threads), dtype, ""
    names = [str(d.get("name") or "") for d in evidence.devices if d.get("kind") == "gpu"]
    model = next((m for m in map(gpu_model, names) if m), None)
    if model is None:
        return None, "", dtype, f"no peak known for {names[0] if names else 'the GPU'}"
    peak = PEAKS[model].get(dtype)
    if peak is None:
        return None, "", dtype, f"{model} has no {dtype} peak in the table"
    return peak, f"{model} {dtype} (datasheet)", dtype, ""


def _cpu_peak_source(evidence: RunEvidence, threads: Any) -> str:
    """Where a CPU peak came from: this run's probe, or the host's cache (when it was probed,
    and the share of it the run's small matmul got at its exit)."""
    source = f"measured on the run's host: fp32 matmul, {threads} threads"
    probed = evidence.fact("cpu.peak_probed_at")
    if not isinstance(probed, (int, float)):
        return source
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(probed))
    share = evidence.fact("cpu.peak_share")
    at = f", at {share:.0%} of it for this run's share of the CPU" if share is not None else ""
    return f"{source} (probed {when}{at})"


def _with(base: Utilisation, **changes: Any) -> Utilisation:
    return replace(base, **changes)
