"""Rules about gradient accumulation: several backward passes per optimizer step.

The agent counts, in the first optimizer steps, the backward passes per step, the steps whose
gradients a `zero_grad()` cleared between two backwards, and the DDP forwards that will
all-reduce in their backward (outside `no_sync()`) — see
agent/perfweb_agent/runtime/accumulation.py.
"""

from __future__ import annotations

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.signals import median, numeric_fact

DISCARDING_SHARE_MIN = 0.5  # of the checked optimizer steps: the loop's pattern, not a one-off
BACKWARDS_PER_STEP_MIN = 1.5  # backward passes per optimizer step that make an accumulation
SYNCED_PER_STEP_MIN = 1.5  # all-reducing DDP backwards per optimizer step


@rule("training.accumulation_discarded", risk="operator")
def training_accumulation_discarded(evidence: RunEvidence) -> Finding | None:
    """What: `zero_grad()` runs between the backward passes of one optimizer step.

    Why: gradients accumulate in `.grad` across backward passes until they are zeroed; a
    `zero_grad()` inside the micro-step loop throws away everything accumulated so far, so
    each optimizer step trains on its last micro-batch only — the run trains wrong (a
    smaller effective batch, a loss scaled by 1/k) while it looks healthy.

    Fix: call `zero_grad()` once per optimizer step, right after `optimizer.step()`, not in
    the micro-step loop.
    """
    discarding = numeric_fact(evidence, "training.zero_grad_discards_per_step")
    backwards = numeric_fact(evidence, "training.backward_per_step")
    checked = numeric_fact(evidence, "training.accumulation_checked_steps")
    if discarding is None or backwards is None or discarding < DISCARDING_SHARE_MIN:
        return None
    if backwards < BACKWARDS_PER_STEP_MIN:
        return None
    return finding(
        "training.accumulation_discarded",
        title=f"zero_grad() clears the gradients between the {backwards:g} backward passes "
        "of each optimizer step: each step trains on its last micro-batch only",
        confidence=0.9,
        gain=0.0,
        basis="critical: the run trains on a fraction of its data, no time to recover",
        evidence=[
            Evidence("backward passes per optimizer step", backwards, "calls", "facts"),
            Evidence(
                "share of steps whose gradients were zeroed between backwards",
                discarding,
                "fraction",
                "facts",
            ),
            Evidence("optimizer steps checked", checked or 0, "steps", "facts"),
        ],
        fix=Fix(
            text="Zero the gradients once per optimizer step, after it: the micro-steps in "
            "between only add to them.",
            snippet="for i, (x, y) in enumerate(loader):\n"
            "    (loss_fn(model(x), y) / accumulate).backward()\n"
            "    if (i + 1) % accumulate == 0:\n"
            "        optimizer.step()\n"
            "        optimizer.zero_grad()",
        ),
        critical=True,
    )


@rule("distributed.no_sync", risk="distributed")
def distributed_no_sync(evidence: RunEvidence) -> Finding | None:
    """What: gradient accumulation under DistributedDataParallel all-reduces on every
    micro-step: more than one backward per optimizer step, each followed by an all-reduce.

    Why: DDP all-reduces the whole gradient at the end of every backward pass unless it runs
    inside `model.no_sync()`; the sum over micro-steps is the same either way, so k - 1 of
    every k all-reduces are pure communication cost.

    Fix: run the first k - 1 micro-steps of each optimizer step inside `model.no_sync()`;
    only the last backward all-reduces.
    """
    if evidence.fact("parallel.mode") != "ddp":
        return None
    synced = numeric_fact(evidence, "ddp.synced_backward_per_step")
    backwards = numeric_fact(evidence, "training.backward_per_step")
    if synced is None or backwards is None:
        return None
    if synced < SYNCED_PER_STEP_MIN or backwards < BACKWARDS_PER_STEP_MIN:
        return None
    saved = 1 - 1 / synced  # share of the all-reduces no_sync() removes
    items = [
        Evidence("backward passes per optimizer step", backwards, "calls", "facts"),
        Evidence("all-reducing backwards per optimizer step", synced, "calls", "facts"),
    ]
    share, source = _allreduce_share(evidence)
    if share is not None:
        items.append(Evidence("exposed all-reduce share of the step", share, "fraction", source))
        gain = share * saved
        basis = (
            f"measured exposed all-reduce share ({share:.1%}, {source}) x (1 - 1/{synced:g}) "
            "for one all-reduce per optimizer step"
        )
    else:
        gain = 0.0
        basis = "no all-reduce time measured (no trace): the saving is not estimated"
    return finding(
        "distributed.no_sync",
        title=f"{synced:g} gradient all-reduces per optimizer step where 1 would do "
        "(accumulation without no_sync())",
        confidence=0.8,
        gain=gain,
        basis=basis,
        evidence=items,
        fix=Fix(
            text=f"Skip the all-reduce on {synced - 1:g} of every {synced:g} micro-steps: "
            "the gradients still sum locally, and the last backward all-reduces them once.",
            snippet="for i, (x, y) in enumerate(loader):\n"
            "    last = (i + 1) % accumulate == 0\n"
            "    with contextlib.nullcontext() if last else model.no_sync():\n"
            "        (loss_fn(model(x), y) / accumulate).backward()\n"
            "    if last:\n"
            "        optimizer.step()\n"
            "        optimizer.zero_grad()",
        ),
    )


def _allreduce_share(evidence: RunEvidence) -> tuple[float | None, str]:
    """The share of the step the gradients' all-reduce takes, from the traces (median over
    ranks): GPU all-reduce kernels' exposed time, else the part of gloo's all-reduces on the
    host that no other operator overlaps (the training thread waits on it)."""
    shares: list[float] = []
    for trace in evidence.traces:
        step_us = trace.mean_step_us
        if not step_us or not trace.steps:
            continue
        allreduce = trace.collectives.get("AllReduce")
        if allreduce and allreduce.get("exposed_us"):
            shares.append(allreduce["exposed_us"] / len(trace.steps) / step_us)
        elif "exposed_share" in trace.cpu_all_reduce:
            shares.append(trace.cpu_all_reduce["exposed_share"])
    value = median(shares)
    return (None, "") if value is None else (min(1.0, value), "trace")
