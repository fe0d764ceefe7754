"""Data-path rules about DataLoader workers and the host's cores."""

from __future__ import annotations

from recommender.evidence import RunEvidence
from recommender.rules.base import Evidence, Finding, Fix, counted, finding, rule
from recommender.rules.cpu_budget import core_budget

OVERSUBSCRIPTION_COST = 0.15  # prior: share of CPU-side time lost per 1x of oversubscription


@rule("dataloader.too_many_workers", risk="data-path")
def dataloader_too_many_workers(evidence: RunEvidence) -> Finding | None:
    """What: DataLoader workers x ranks take more cores than the host has, while the loop is
    not waiting on data.

    Why: every worker is a process with its own thread; past the cores they only take CPU
    time from the ranks' intra-op threads (and memory, one dataset copy each), for batches
    the loop does not wait for.

    Fix: fewer workers, within one core budget with the intra-op threads:
    ranks x (threads + workers) <= cores.
    """
    budget = core_budget(evidence)
    if budget is None or budget.data_bound or budget.workers <= budget.workers_target:
        return None
    if budget.busy_threads <= budget.cores:
        return None
    ratio = budget.busy_threads / budget.cores
    target = budget.workers_target
    return finding(
        "dataloader.too_many_workers",
        title=f"{budget.ranks} x {counted(budget.workers, 'DataLoader worker')} on "
        f"{counted(budget.cores, 'core')}, "
        "and the loop does not wait for data",
        confidence=0.6,
        gain=min(0.5, OVERSUBSCRIPTION_COST * (ratio - 1)),
        basis=f"prior: {OVERSUBSCRIPTION_COST:.0%} of CPU-side time per 1x of oversubscription",
        evidence=[
            Evidence("DataLoader workers per rank", budget.workers, "processes", "facts"),
            Evidence("intra-op threads", budget.intra, "threads", "facts"),
            Evidence("ranks on this host", budget.ranks, "processes", "facts"),
            Evidence("usable cores", budget.cores, "cores", "facts"),
            Evidence("busy threads / cores", ratio, "ratio", "facts"),
        ],
        fix=Fix(
            text=f"Use {target} DataLoader worker(s) per rank with {budget.intra_target} "
            f"intra-op thread(s): {budget.ranks} x ({budget.intra_target} + {target}) threads "
            f"on {budget.cores} cores.",
            snippet=f"DataLoader(dataset, ..., num_workers={target}, persistent_workers=True)\n"
            f"torch.set_num_threads({budget.intra_target})",
            knobs={"num_workers": target},
        ),
    )
