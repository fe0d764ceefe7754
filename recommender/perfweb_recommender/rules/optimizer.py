"""Optimizer rules: the optimizer phase of the step anatomy
(recommender/perfweb_recommender/anatomy.py)."""

from __future__ import annotations

from perfweb_recommender.anatomy import step_anatomy
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule

FOREACH_SHARE_MIN = 0.15  # optimizer phase, share of the step
SMALL_PARAMS_MIN = 32  # parameter tensors from which a per-parameter loop costs
SMALL_PARAM_NUMEL_MAX = 1 << 16  # median elements per tensor: below, launch/dispatch dominates
FOREACH_SAVING = 0.5  # prior: share of a per-parameter optimizer's time foreach/fused saves


@rule("optimizer.foreach", risk="operator")
def optimizer_foreach(evidence: RunEvidence) -> Finding | None:
    """What: the optimizer's step takes a large share of every step (>= 15%) and runs as a
    per-parameter loop: `foreach=False`, torch's default on a CPU, or a hand-written
    optimizer looping over many small parameter tensors.

    Why: a per-parameter loop dispatches a handful of small operators per tensor from Python;
    with many small tensors the step is dispatch overhead, not arithmetic. The multi-tensor
    (`foreach`) and fused implementations update every tensor in a few calls.

    Fix: `foreach=True` (multi-tensor), or `fused=True` on CUDA; for a hand-written optimizer,
    the `torch._foreach_*` operators or torch.optim's built-in of the same algorithm.
    """
    anatomy = step_anatomy(evidence)
    if anatomy is None:
        return None
    share = anatomy.shares.get("optimizer", 0.0)
    foreach = evidence.fact("optimizer.foreach")
    fused = evidence.fact("optimizer.fused")
    tensors = int(evidence.fact("optimizer.param_tensors", 0) or 0)
    median_numel = int(evidence.fact("optimizer.median_param_numel", 0) or 0)
    many_small = tensors >= SMALL_PARAMS_MIN and median_numel <= SMALL_PARAM_NUMEL_MAX
    on_cuda = evidence.uses_cuda()
    # torch's default is the multi-tensor path for CUDA tensors, the loop for CPU ones
    default_loops = foreach == "absent" or (foreach == "default" and not on_cuda)
    looped = foreach is False or (default_loops and many_small)
    if share < FOREACH_SHARE_MIN or not looped or fused is True:
        return None
    name = evidence.fact("optimizer.class", "the optimizer")
    hand_written = foreach == "absent"
    items = [
        Evidence(
            "optimizer phase, share of the step (median)",
            round(share, 4),
            "fraction",
            "metrics (step anatomy)",
        ),
        Evidence(
            "optimizer phase (median)",
            anatomy.phases.get("optimizer", 0.0),
            "s",
            "metrics (step anatomy)",
        ),
        Evidence("optimizer", name, "", "facts"),
        Evidence("foreach", str(foreach), "", "facts"),
        Evidence("parameter tensors", tensors, "tensors", "facts"),
        Evidence("median elements per tensor", median_numel, "elements", "facts"),
    ]
    if hand_written:
        text = (
            f"{name} loops over {tensors} parameter tensors in Python: write its update with "
            "the torch._foreach_* operators, or use torch.optim's built-in with foreach=True."
        )
        snippet = (
            "# one call for every tensor instead of one per tensor\n"
            "torch._foreach_mul_(bufs, momentum); torch._foreach_add_(bufs, grads)\n"
            "torch._foreach_add_(params, bufs, alpha=-lr)"
        )
    else:
        flag = "fused=True" if on_cuda else "foreach=True"
        text = f"Build {name} with {flag}: one multi-tensor update instead of one per tensor."
        snippet = f"opt = torch.optim.{name}(model.parameters(), lr=lr, {flag})"
    return finding(
        "optimizer.foreach",
        title=f"The optimizer takes {share:.0%} of each step, one parameter tensor at a time",
        confidence=0.7 if foreach is False or hand_written else 0.55,
        gain=share * FOREACH_SAVING,
        basis=f"measured optimizer share of the step x prior: a multi-tensor update saves "
        f"~{FOREACH_SAVING:.0%} of a per-parameter loop over small tensors",
        evidence=items,
        fix=Fix(text=text, snippet=snippet),
    )
