"""What each workload should make the recommender say, and the A/B pairs the kit measures.

Ids only (FIXES.md is the contract; titles and thresholds change as the rules are tuned).
"""

from __future__ import annotations

from dataclasses import dataclass

HEALTHY_GAIN_MAX = 0.10  # a healthy run may show findings, none claiming this share of a step
PHASE_SUM_ERROR_MAX = 0.05  # the step anatomy's phases sum to the step within this (median)


@dataclass(frozen=True)
class Expectation:
    """The finding a workload's planted cause should rank first (None: the healthy loop)."""

    workload: str
    finding: str | None
    plant: str
    # The rule needs a condition to hold this long (s); a shorter run can only show that
    # its inputs are there (the outcome is then `inputs_only`, never `found_first`).
    needs_window_s: float | None = None
    busy: bool = False  # compute-heavy: NVML utilisation should reach BUSY_UTILIZATION_PCT
    # model FLOP utilisation the run must reach (a matmul loop) or stay under (launch-bound)
    mfu_min: float | None = None
    mfu_max: float | None = None


EXPECTATIONS: tuple[Expectation, ...] = (
    Expectation("pageable_h2d", "dataloader.pin_memory", "DataLoader pin_memory=False, 8 MB H2D"),
    Expectation(
        "fp32_matmul", "precision.amp", "fp32 Linear layers, no autocast, TF32 off", busy=True
    ),
    Expectation(
        "fp32_conv", "precision.amp", "fp32 convolutions, no autocast, cuDNN TF32 off", busy=True
    ),
    Expectation("empty_cache", "memory.empty_cache_in_loop", "torch.cuda.empty_cache() per step"),
    Expectation("item_sync", "sync.host_device", "loss.item() every step"),
    Expectation(
        "launch_bound", "launch.overhead", "24 Linear(64) layers over batches of 4", mfu_max=0.10
    ),
    Expectation("input_bound", "dataloader.num_workers", "per-sample CPU work, num_workers=0"),
    Expectation("fp16_no_scaler", "precision.scaler_misuse", "fp16 autocast, GradScaler disabled"),
    Expectation("idle_held", "gpu.idle_memory_held", "4 GiB held while idle", needs_window_s=300.0),
    Expectation("healthy_bf16", None, "none: bf16 autocast, data on the GPU, no syncs", busy=True),
    Expectation(
        "bf16_matmul", None, "none: large bf16 matmuls, data on the GPU", busy=True, mfu_min=0.50
    ),
)
BY_WORKLOAD = {e.workload: e for e in EXPECTATIONS}


@dataclass(frozen=True)
class AbPair:
    """A knob measured with `perf-agent ab` on the workload whose plant it fixes."""

    knob: str
    workload: str
    finding: str


AB_PAIRS: tuple[AbPair, ...] = (
    AbPair("amp=bf16", "fp32_matmul", "precision.amp"),
    AbPair("pin_memory=true", "pageable_h2d", "dataloader.pin_memory"),
)
