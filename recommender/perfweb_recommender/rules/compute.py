"""Compute rules: how far the steps are from what the device can do
(recommender/perfweb_recommender/compute.py)."""

from __future__ import annotations

from perfweb_recommender.anatomy import step_anatomy
from perfweb_recommender.compute import utilisation
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule

MFU_MIN = 0.30  # achieved FLOP/s over the device's peak for the run's dtype
# prior: share of the way to MFU_MIN the named fix recovers. An umbrella finding: the rules
# of the phase it names say what to change, with their own measured gains, and rank above it.
RECOVERABLE = 0.1
# the step's largest phase -> what to try first (FIXES.md: data path first)
NEXT_STEP = {
    "data": ("The step waits on data: feed it first (DataLoader workers, pinned memory, "
             "prefetching), then look at the compute.",
             "DataLoader(dataset, batch_size=..., num_workers=4, pin_memory=True)"),
    "copy": ("Host-to-device copies take the step: pinned memory and non_blocking copies, "
             "or keep the data on the device.",
             "x = x.to(device, non_blocking=True)  # with pin_memory=True"),
    "optimizer": ("The optimizer takes the step: a multi-tensor (foreach) or fused update.",
                  "opt = torch.optim.AdamW(params, lr=lr, foreach=True)"),
    "collective": ("Collectives take the step: overlap them with compute, fewer and larger "
                   "all-reduces (bucket size, gradient accumulation).",
                   "DistributedDataParallel(model, bucket_cap_mb=100)"),
}  # fmt: skip
COMPUTE_STEP = (
    "The device computes far below its peak in the forward and backward: many small "
    "operators (launch overhead: torch.compile, CUDA Graphs), a precision without tensor "
    "cores (bf16 autocast, TF32), or a batch too small to fill it.",
    "model = torch.compile(model)\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n"
    "    loss = model(x)",
)


@rule("compute.low_mfu", risk="operator")
def compute_low_mfu(evidence: RunEvidence) -> Finding | None:
    """What: the steps reach less than 30% of the device's peak FLOP/s for the run's compute
    dtype (model FLOP utilisation, from one step's FLOPs counted by the agent; on a CPU the
    peak is a matmul probe on the run's host).

    Why: a step that uses a small share of what the device can compute spends its time on
    something else: waiting for data, copies, launching many small operators, a precision
    without tensor cores, a batch too small to fill the device. The step anatomy says which
    phase holds the time.

    Fix: follow the step's largest phase: the data path first, then launch overhead
    (`torch.compile`), precision (bf16 autocast, TF32), batch size.
    """
    use = utilisation(evidence)
    mfu = use.mfu
    if mfu is None or mfu >= MFU_MIN:
        return None
    anatomy = step_anatomy(evidence)
    largest = anatomy.largest(measured_only=True) if anatomy is not None else None
    text, snippet = NEXT_STEP.get(largest or "", COMPUTE_STEP)
    items = [
        Evidence("model FLOP utilisation", round(mfu, 4), "fraction", "facts + metrics"),
        Evidence("achieved", use.achieved_flops or 0.0, "FLOP/s", "metrics (step time)"),
        Evidence("peak", use.peak_flops or 0.0, "FLOP/s", use.peak_source),
        Evidence("FLOPs per step", use.flops_per_step or 0.0, "FLOPs", "facts (agent count)"),
    ]
    if anatomy is not None and largest is not None:
        items.append(
            Evidence(
                f"largest phase: {largest}",
                round(anatomy.shares[largest], 4),
                "fraction",
                "metrics (step anatomy)",
            )
        )
    return finding(
        "compute.low_mfu",
        title=f"The steps reach {mfu:.1%} of the device's peak ({use.dtype})"
        + (f"; most of the step is {largest.replace('_', ' ')}" if largest else ""),
        confidence=0.3,
        gain=RECOVERABLE * (1 - mfu / MFU_MIN),
        basis=f"prior: {RECOVERABLE:.0%} of the way from the measured MFU to {MFU_MIN:.0%}",
        evidence=items,
        fix=Fix(text=text, snippet=snippet),
    )
