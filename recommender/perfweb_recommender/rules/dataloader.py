"""Data-path rules about DataLoader workers and the host's cores."""

from __future__ import annotations

import statistics
from typing import Any

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, counted, finding, rule
from perfweb_recommender.rules.cpu_budget import WORKERS_CAP, CoreBudget, core_budget
from perfweb_recommender.rules.cuda_only import cpu_only_run, pin_memory_without_gpu
from perfweb_recommender.rules.loader_wait import IO_RUNNABLE_MAX, sleeping_workers
from perfweb_recommender.rules.signals import (
    data_wait_share,
    loader_wait_fraction,
    trace_share,
    training_loader,
)
from perfweb_recommender.rules.snippets import dataloader_snippet
from perfweb_recommender.thresholds import DATA_WAIT_SHARE_MIN

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
            snippet=dataloader_snippet(
                evidence, {"num_workers": target, "persistent_workers": target > 0}
            )
            + f"\ntorch.set_num_threads({budget.intra_target})",
            knobs={"num_workers": target},
        ),
    )


DATA_WAIT_RECOVERABLE = 0.9  # workers overlap loading with compute; some wait remains
PAGEABLE_H2D_SHARE_MIN = 0.005  # fraction of step time in pageable host-to-device copies
PINNED_SPEEDUP = 2.0  # pinned copies run ~2x faster than pageable ones (and can be async)
EPOCH_STALL_FACTOR = 5.0  # a step waiting > 5x the median data wait is a worker (re)spawn
EPOCH_STALLS_MIN = 2  # stalls that must recur before we blame worker start-up
MOSTLY_WAITING = 0.5  # a loop waiting this share of each step or more keeps its workers
MIN_THREAD_SAMPLES = 5  # schedstat samples of the main thread needed to judge its loading


@rule("dataloader.num_workers", risk="data-path")
def dataloader_num_workers(evidence: RunEvidence) -> Finding | None:
    """What: the training loop spends a large share of each step waiting for the next batch.

    Why: with `num_workers=0` (or too few workers) the main process loads and collates every
    batch itself, so the model waits on Python data code instead of overlapping with it.

    Fix: raise `num_workers` (bounded by the cores per rank), keep the workers alive with
    `persistent_workers=True` and let each prefetch a few batches (`prefetch_factor`).
    """
    share = data_wait_share(evidence)
    trace_shares = [t.step_shares.get("dataloader", 0.0) for t in evidence.traces if t.steps]
    trace_dl = max(trace_shares) if trace_shares else None
    measured = share if share is not None else trace_dl
    waited_on = training_loader(evidence)
    own = loader_wait_fraction(evidence, waited_on[0]) if waited_on else None
    if measured is not None and own is not None and len(evidence.dataloaders()) > 1:
        measured *= own  # each loader is judged on its own wait: the training loop's loader
    if measured is None or measured < DATA_WAIT_SHARE_MIN:
        return None
    workers = int(waited_on[1].get("num_workers", 0) or 0) if waited_on else None
    budget = core_budget(evidence)
    items = [
        Evidence(
            "step time waiting on the DataLoader",
            measured,
            "fraction",
            "metrics (agent step timings)" if share is not None else "trace",
        )
    ]
    if waited_on is not None and len(evidence.dataloaders()) > 1:
        index, loader = waited_on
        name = f"#{index} ({loader.get('dataset') or 'a dataset'})"
        items.append(Evidence("the DataLoader the training loop waits on", name, "", "facts"))
        if own is not None:
            items.append(
                Evidence(
                    "its share of the time blocked in DataLoaders",
                    own,
                    "fraction",
                    "metrics (agent, per DataLoader)",
                )
            )
    if trace_dl is not None and share is not None:
        items.append(Evidence("DataLoader share of profiled steps", trace_dl, "fraction", "trace"))
    confidence, target = 0.7, 4
    if workers is not None:
        items.append(Evidence("num_workers", workers, "workers", "facts"))
        target = max(workers + 1, 2)
    if budget is not None:
        items.append(Evidence("usable cores per rank", budget.per_rank, "cores", "facts"))
        target = budget.workers_target
        if workers is not None and workers <= budget.per_rank and measured >= MOSTLY_WAITING:
            # The budget's spare core is for a training thread that computes; this one
            # mostly waits on its workers, and fewer of them only make the wait longer (2
            # CPU-bound workers on 2 cores were told to use 1 on a busy CI host).
            target = max(target, workers)
    loading = _main_thread_loading(evidence, measured) if workers == 0 else None
    if loading is not None:
        runnable, cpu = loading
        items.append(
            Evidence(
                "the main thread runnable while it loads (running or waiting for a core)",
                runnable,
                "fraction",
                "metrics (schedstat)",
            )
        )
        if runnable <= IO_RUNNABLE_MAX and budget is not None:
            # The loading sleeps: workers that wait take almost no core, so enough of them
            # to hide the wait, past the core count (as dataloader.io_wait proposes for a
            # loader with workers); the main process loads a batch in `measured` steps.
            target = sleeping_workers(
                load=measured, wait=measured, busy=cpu, cores=budget.per_rank, at_least=target
            )
    if workers is not None:
        confidence = 0.9 if target > workers else 0.4
    gain, basis = _workers_gain(measured, workers, target)
    return finding(
        "dataloader.num_workers",
        title=f"{measured:.0%} of each step waits for the DataLoader",
        confidence=confidence,
        gain=gain,
        basis=basis,
        evidence=items,
        fix=_workers_fix(evidence, budget, target, workers),
    )


def _main_thread_loading(evidence: RunEvidence, wait: float) -> tuple[float, float] | None:
    """With no workers the main thread loads the batches itself: of that loading, the share
    it was runnable (on a CPU or waiting for one: low where it sleeps on I/O, whatever the
    host's load) and the share it ran (what a worker doing it would take of a core), from
    its schedstat shares of the wall time less the rest of the step's. None where the agent
    did not sample the thread."""
    ran = evidence.process_values("process.thread_cpu")
    waited = evidence.process_values("process.run_queue_wait")
    if len(ran) < MIN_THREAD_SAMPLES or len(waited) < MIN_THREAD_SAMPLES or wait <= 0:
        return None
    run, queue = statistics.median(ran) / 100.0, statistics.median(waited) / 100.0
    compute = 1.0 - wait  # runnable throughout, queued as often as the rest
    running = run / (run + queue) if run + queue > 0 else 1.0
    runnable = min(1.0, max(0.0, run + queue - compute) / wait)
    cpu = min(1.0, max(0.0, run - compute * running) / wait)
    return runnable, cpu


def _workers_gain(wait: float, workers: int | None, target: int) -> tuple[float, str]:
    """The share of a step `target` workers recover, and how it was estimated.

    In units of today's step: compute is 1 - wait. Loading one batch takes L: the whole wait
    where the main process loads (0 workers), or `workers` steps where that many workers
    already load in turn and the loop still waits on them. `target` workers load a batch
    every L / target, so the step becomes max(compute, L / target), of which
    DATA_WAIT_RECOVERABLE is assumed overlapped. Where the fix keeps the workers (cheaper
    samples), the wait itself is what there is to recover."""
    amdahl = f"Amdahl on the measured wait share ({wait:.1%})"
    overlap = f"{DATA_WAIT_RECOVERABLE:.0%} assumed overlappable"
    if workers is None or target <= workers:
        return wait * DATA_WAIT_RECOVERABLE, f"{amdahl}, {overlap} by workers"
    compute = 1.0 - wait
    load = wait if workers == 0 else float(workers)
    step = max(compute, load / target)
    return (1.0 - step) * DATA_WAIT_RECOVERABLE, (
        f"{amdahl}: {target} worker(s) load a batch in {load / target:.0%} of today's step, "
        f"beside {compute:.0%} of compute; {overlap}"
    )


def _workers_fix(
    evidence: RunEvidence, budget: CoreBudget | None, target: int, workers: int | None
) -> Fix:
    """Raise the workers within the core budget (and lower the threads to make room); past
    the cores, more workers only compete with each other: bring them back into the budget."""
    if budget is not None and workers is not None and target < workers:
        return Fix(
            text=f"{workers} worker(s) beside the rank's own thread(s) need more than its "
            f"{budget.per_rank} cores; use {target} worker(s) with {budget.intra_target} "
            "intra-op thread(s) and make each sample cheaper to load (pre-decoded data, "
            "vectorised transforms).",
            snippet=f"torch.set_num_threads({budget.intra_target})\n"
            + dataloader_snippet(
                evidence, {"num_workers": target, "persistent_workers": target > 0}
            ),
            knobs={"num_workers": target},
        )
    if workers is not None and target <= workers:
        return Fix(
            text=f"The {workers} worker(s) are as many as the core budget gives (the rank's "
            f"cores less one, at most {WORKERS_CAP} workers); make each sample cheaper to "
            "load (pre-decoded data, vectorised transforms) and keep the workers alive "
            "between epochs.",
            snippet=dataloader_snippet(
                evidence, {"persistent_workers": True, "prefetch_factor": 4}
            ),
        )
    threads = ""
    snippet_threads = ""
    if budget is not None and budget.intra > budget.intra_target:
        threads = (
            f", and {budget.intra_target} intra-op thread(s) so that "
            f"{budget.ranks} x ({budget.intra_target} + {target}) fits {budget.cores} cores"
        )
        snippet_threads = f"torch.set_num_threads({budget.intra_target})\n"
    return Fix(
        text=f"Load batches in {target} worker processes and keep them alive between "
        f"epochs{threads}.",
        snippet=snippet_threads
        + dataloader_snippet(
            evidence,
            {"num_workers": target, "persistent_workers": True, "prefetch_factor": 2},
        ),
        knobs={"num_workers": target},
    )


@rule("dataloader.pin_memory", risk="data-path")
def dataloader_pin_memory(evidence: RunEvidence) -> Finding | None:
    """What: host-to-device copies come from pageable (unpinned) memory.

    Why: CUDA must first copy pageable memory into a pinned staging buffer, which halves the
    copy bandwidth and makes the copy synchronous with the host.

    On a run without a GPU, `pin_memory=True` is reported as informational, gain 0.

    Fix: `pin_memory=True` in the DataLoader and `.to(device, non_blocking=True)` on the batch.
    """
    if cpu_only_run(evidence):
        return pin_memory_without_gpu(evidence)
    best: tuple[float, float, int] | None = None
    for trace in evidence.traces:
        row = trace.memcpy.get("HtoD pageable")
        if row:
            share = trace_share(trace, row["us"])
            if best is None or share > best[0]:
                best = (share, row["us"], int(row["count"]))
    pinned_off = [d for d in evidence.dataloaders() if d.get("pin_memory") is False]
    if best is None or best[0] < PAGEABLE_H2D_SHARE_MIN:
        return None
    share, micros, count = best
    items = [
        Evidence("pageable H2D copy time", micros, "µs", "trace"),
        Evidence("pageable H2D copies", count, "copies", "trace"),
        Evidence("share of step time", share, "fraction", "trace"),
    ]
    if pinned_off:
        items.append(Evidence("DataLoader pin_memory", False, "flag", "facts"))
    return finding(
        "dataloader.pin_memory",
        title=f"Pageable host-to-device copies take {share:.1%} of each step",
        confidence=0.8 if pinned_off else 0.6,
        gain=share * (1 - 1 / PINNED_SPEEDUP),
        basis=f"copy share {share:.1%} x (1 - 1/{PINNED_SPEEDUP:g}) for pinned bandwidth",
        evidence=items,
        fix=Fix(
            text="Pin the batches and copy them asynchronously.",
            snippet=dataloader_snippet(evidence, {"pin_memory": True})
            + "\nx = x.to(device, non_blocking=True)",
            knobs={"pin_memory": True},
        ),
    )


@rule("dataloader.persistent_workers", risk="data-path")
def dataloader_persistent_workers(evidence: RunEvidence) -> Finding | None:
    """What: at every epoch start the loop stalls while DataLoader workers are spawned again.

    Why: without `persistent_workers=True` the worker processes are torn down after each epoch
    and re-created (re-importing, re-opening files) before the next epoch's first batch.

    Fix: `persistent_workers=True` (with `num_workers > 0`).
    """
    loaders = [
        d
        for d in evidence.dataloaders()
        if int(d.get("num_workers", 0) or 0) > 0 and d.get("persistent_workers") is False
    ]
    steps = [s for s in evidence.steps if s.data_wait_s is not None]
    if not loaders or len(steps) < 10:
        return None
    typical = statistics.median(s.data_wait_s or 0.0 for s in steps)
    threshold = max(EPOCH_STALL_FACTOR * typical, 0.05)
    stalls = [s for s in steps[1:] if (s.data_wait_s or 0.0) > threshold]
    boundaries = _epoch_starts(loaders)
    if boundaries is not None:  # only a new iterator over a used-up sampler respawns workers
        stalls = sorted(stalls, key=lambda s: s.data_wait_s or 0.0)[::-1][:boundaries]
    if len(stalls) < EPOCH_STALLS_MIN:
        return None
    excess = sum((s.data_wait_s or 0.0) - typical for s in stalls)
    total = sum(s.duration_s for s in steps)
    share = excess / total if total else 0.0
    return finding(
        "dataloader.persistent_workers",
        title=f"{len(stalls)} epoch-start stalls while DataLoader workers respawn",
        confidence=0.6,
        gain=share,
        basis="the stalls' excess wait over the median wait, as a share of all step time",
        evidence=[
            Evidence("stalls", len(stalls), "steps", "metrics (agent step timings)"),
            *_boundary_evidence(boundaries),
            Evidence("stall time beyond typical wait", excess, "s", "metrics"),
            Evidence("persistent_workers", False, "flag", "facts"),
        ],
        fix=Fix(
            text="Keep the workers alive between epochs.",
            snippet=dataloader_snippet(evidence, {"persistent_workers": True}),
            knobs={"persistent_workers": True},
        ),
    )


def _epoch_starts(loaders: list[dict[str, Any]]) -> int | None:
    """Epoch boundaries the agent saw in these loaders (`dataloader.N.epoch_starts`: a new
    iterator over a loader whose last one ran out), None when it did not count them. A slow
    first batch, an evaluation pass or a busy host is no boundary: an infinite sampler has
    none at all."""
    counts = [d.get("epoch_starts") for d in loaders]
    if not counts or not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        return None
    return sum(int(c) for c in counts if c is not None)


def _boundary_evidence(boundaries: int | None) -> list[Evidence]:
    if boundaries is None:  # an agent that did not count them
        return []
    label = "epoch starts (new iterator, sampler used up)"
    return [Evidence(label, boundaries, "epochs", "facts (agent, per DataLoader)")]
