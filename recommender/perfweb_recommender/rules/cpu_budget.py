"""One budget of the host's CPU cores, which every CPU-side fix draws from.

The cores of a host are shared by `ranks` processes, each running `intra` intra-op threads
and `workers` DataLoader worker processes (each worker runs one intra-op thread):
ranks x (intra + workers) threads compete for the cores. The split below gives each rank its
share, cores // ranks, and divides it between workers and threads according to what the run
needs: a data-bound loop gets more workers, a compute-bound one keeps its threads. Every rule
that proposes `num_workers=N` or `threads=N` takes N from this one split, so fixes shown
together never oversubscribe the host again (`ranks x (intra + workers) <= cores` whenever a
rank has at least two cores).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.signals import data_wait_share, ranks_per_host, usable_cores
from perfweb_recommender.thresholds import DATA_WAIT_SHARE_MIN

DATA_BOUND_SHARE = DATA_WAIT_SHARE_MIN  # the same "input bound" as dataloader.num_workers
IDLE_WORKERS_SHARE = 0.5  # not data-bound: at most this share of a rank's cores for workers
WORKERS_CAP = 8  # data-bound: workers proposed at most (each holds a copy of the dataset)


@dataclass(frozen=True)
class CoreBudget:
    """The host's cores, what the run uses now, and the split every CPU-side fix proposes."""

    cores: int
    ranks: int
    intra: int  # intra-op threads per rank now
    workers: int  # DataLoader workers per rank now
    data_bound: bool
    workers_target: int  # what the workers fix proposes (the current count when none is shown)
    intra_target: int  # the rank's cores left beside workers_target

    @property
    def per_rank(self) -> int:
        """Cores each rank may use."""
        return max(1, self.cores // self.ranks)

    @property
    def busy_threads(self) -> int:
        """Threads competing for the cores now: ranks x (intra-op threads + workers)."""
        return self.ranks * (self.intra + self.workers)

    @property
    def planned_threads(self) -> int:
        """Threads once the proposed split is applied."""
        return self.ranks * (self.intra_target + self.workers_target)


def core_budget(evidence: RunEvidence) -> CoreBudget | None:
    """The run's core budget; None without the core count or the intra-op thread count."""
    cores = usable_cores(evidence)
    intra = evidence.fact("threads.intra_op")
    if not cores or not isinstance(intra, int) or isinstance(intra, bool):
        return None
    ranks = ranks_per_host(evidence)
    loaders = evidence.dataloaders()
    workers = sum(int(d.get("num_workers", 0) or 0) for d in loaders)
    wait = data_wait_share(evidence)
    if wait is None:
        shares = [t.step_shares.get("dataloader", 0.0) for t in evidence.traces if t.steps]
        wait = max(shares) if shares else None
    data_bound = wait is not None and wait >= DATA_BOUND_SHARE
    per_rank = max(1, cores // ranks)
    workers_target = _workers_target(
        per_rank=per_rank, workers=workers, data_bound=data_bound, has_loader=bool(loaders)
    )
    oversubscribed = ranks * (intra + workers) > cores
    if not data_bound and not (workers > workers_target and oversubscribed):
        workers_target = workers  # no workers fix will be shown: the threads fit around them
    intra_target = max(1, per_rank - workers_target)
    return CoreBudget(
        cores=cores,
        ranks=ranks,
        intra=intra,
        workers=workers,
        data_bound=data_bound,
        workers_target=workers_target,
        intra_target=intra_target,
    )


def _workers_target(*, per_rank: int, workers: int, data_bound: bool, has_loader: bool) -> int:
    """Workers per rank: for a data-bound loop every core but one (up to WORKERS_CAP, or the
    workers it already has), for one that is not at most half the rank's cores; never more
    than the cores allow."""
    if not has_loader:
        return 0
    room = max(1, per_rank - 1)
    if data_bound:
        return min(room, max(workers, WORKERS_CAP))
    return min(workers, room, max(1, int(per_rank * IDLE_WORKERS_SHARE)))
