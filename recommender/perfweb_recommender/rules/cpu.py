"""Data-path rules about the host CPU: threads and saturation."""

from __future__ import annotations

import statistics

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, counted, finding, rule
from perfweb_recommender.rules.cpu_budget import CoreBudget, core_budget
from perfweb_recommender.rules.signals import loop_busy_share, ranks_per_host, usable_cores
from perfweb_recommender.rules.snippets import pinning_snippet

OVERSUBSCRIPTION_MIN = 1.0  # busy threads / usable cores above this oversubscribes
OVERSUBSCRIPTION_COST = 0.15  # share of CPU-side time lost per 1x of oversubscription
CPU_SATURATED_SHARE = 0.9  # process CPU time / usable cores counted as saturated
GPU_IDLE_UTILIZATION_PCT = 50.0  # GPU utilisation below this while the CPU is saturated
MIN_SAMPLES = 5  # metric samples needed before judging a sustained condition
THREADS_TOO_FEW_FACTOR = 2  # the budget allows at least this many times the threads in use
THREADS_PRIOR_GAIN = 0.09  # prior: most a CPU-bound step gains from its idle cores (< 10%)
# Of the ideal speed-up more threads give GEMMs and convolutions, the share they get: an MLP
# of 1024-wide Linear layers (batch 256) trained 1.84x faster on 2 threads than on 1 on a
# 2-core host (7 interleaved pairs, 2026-12-06; 0.91 of the ideal); 0.8 stays on the low side.
THREADS_SCALING = 0.8
# A measured gain below this is not worth a finding: the steps hardly split over threads (a
# loop of tiny operators; its dispatch is launch.overhead's).
THREADS_GAIN_MIN = 0.05


@rule("cpu.thread_oversubscription", risk="data-path")
def cpu_thread_oversubscription(evidence: RunEvidence) -> Finding | None:
    """What: more busy threads than CPU cores: intra-op threads x processes (ranks + workers),
    with the intra-op threads above their share of the cores.

    Why: OpenMP threads spin and get descheduled; every parallel operator then waits for its
    slowest thread, so CPU-side work (and the feeding of the GPU) slows down.

    Fix: give each process its share of the cores: `OMP_NUM_THREADS` / `torch.set_num_threads`
    = cores per rank minus the DataLoader workers (one core budget with the workers).
    """
    budget = core_budget(evidence)
    if budget is None:
        return None
    ratio = budget.busy_threads / budget.cores
    # Oversubscribed by the workers alone is dataloader.too_many_workers' finding.
    if ratio <= OVERSUBSCRIPTION_MIN or budget.intra <= budget.intra_target:
        return None
    target = budget.intra_target
    return finding(
        "cpu.thread_oversubscription",
        title=f"{counted(budget.busy_threads, 'busy thread')} on {counted(budget.cores, 'core')} "
        f"({ratio:.1f}x oversubscribed)",
        confidence=0.6,
        gain=min(0.5, OVERSUBSCRIPTION_COST * (ratio - 1)),
        basis=f"prior: {OVERSUBSCRIPTION_COST:.0%} of CPU-side time per 1x of oversubscription",
        evidence=_budget_evidence(budget),
        fix=_threads_fix(budget, target),
    )


@rule("cpu.threads_too_few", risk="data-path")
def cpu_threads_too_few(evidence: RunEvidence) -> Finding | None:
    """What: a CPU-bound process runs far fewer intra-op threads than the cores it could use.

    Why: PyTorch's CPU operators (matmul, convolution, elementwise over large tensors) split
    their work over the intra-op threads; with one or two threads on a many-core host most
    cores stay idle while every step waits on the few that work.

    Fix: `torch.set_num_threads(cores per process)` (minus the DataLoader workers), from the
    same core budget as the workers.
    """
    budget = core_budget(evidence)
    if budget is None or budget.data_bound or evidence.uses_cuda():
        return None
    target = budget.intra_target
    if target < THREADS_TOO_FEW_FACTOR * budget.intra:
        return None
    items = _budget_evidence(budget)
    demand = _cpu_demand(evidence)
    if demand is not None:  # measured: is the process using the threads it has?
        if demand < CPU_SATURATED_SHARE * budget.intra:
            return None  # not CPU-bound: more threads would wait like these do
        items.append(
            Evidence("process CPU with its run-queue wait (median)", demand, "cores", "metrics")
        )
    more = 1 - budget.intra / target
    parallel = _parallel_share(evidence)
    if parallel is not None:
        share, source = parallel
        gain = share * more * THREADS_SCALING
        if gain < THREADS_GAIN_MIN:
            return None
        basis = (
            f"measured: {share:.0%} of the profiled steps in GEMMs and convolutions ({source}), "
            f"which split over the intra-op threads: x (1 - {budget.intra}/{target} threads) x "
            f"{THREADS_SCALING:.0%} scaling (prior)"
        )
        items.append(Evidence("steps' time in GEMMs and convolutions", share, "fraction", source))
    else:
        gain = THREADS_PRIOR_GAIN * more
        basis = (
            f"prior: up to {THREADS_PRIOR_GAIN:.0%} of step time for the idle cores "
            "(no CPU trace to measure how much of a step splits over threads; verify with the "
            "threads knob)"
        )
    return finding(
        "cpu.threads_too_few",
        title=f"{counted(budget.intra, 'intra-op thread')} on "
        f"{counted(budget.per_rank, 'core')} per process",
        confidence=0.6 if parallel is not None else 0.5 if demand is not None else 0.3,
        gain=gain,
        basis=basis,
        evidence=items,
        fix=_threads_fix(budget, target),
    )


def _cpu_demand(evidence: RunEvidence) -> float | None:
    """Cores the process wanted (median): its CPU time plus what its main thread waited on a
    run queue (`process.run_queue_wait`), so that other processes taking the cores do not make
    a CPU-bound loop look idle; None without process samples."""
    cpu = evidence.process_values("process.cpu_percent")
    if len(cpu) < MIN_SAMPLES:
        return None
    waits = evidence.process_values("process.run_queue_wait")
    wait = statistics.median(waits) if len(waits) >= MIN_SAMPLES else 0.0
    return (statistics.median(cpu) + wait) / 100.0


def _parallel_share(evidence: RunEvidence) -> tuple[float, str] | None:
    """The largest share of a CPU trace's profiled steps in operators that split over the
    intra-op threads (analysis.host_device.PARALLEL_OPS), with its source; None without one."""
    shares = [
        (float(t.cpu_ops["parallel_share"]), f"trace rank {t.rank}")
        for t in evidence.traces
        if t.steps and "parallel_share" in t.cpu_ops and not t.launch.get("kernels", 0)
    ]
    return max(shares) if shares else None


def _budget_evidence(budget: CoreBudget) -> list[Evidence]:
    return [
        Evidence("intra-op threads", budget.intra, "threads", "facts"),
        Evidence("DataLoader workers", budget.workers, "processes", "facts"),
        Evidence("ranks on this host", budget.ranks, "processes", "facts"),
        Evidence("usable cores", budget.cores, "cores", "facts"),
    ]


def _threads_fix(budget: CoreBudget, target: int) -> Fix:
    workers = (
        f" alongside {budget.workers_target} DataLoader worker(s)" if budget.workers_target else ""
    )
    return Fix(
        text=f"Use {target} intra-op thread(s) per process{workers}: "
        f"{budget.ranks} x ({target} + {budget.workers_target}) threads on {budget.cores} cores.",
        snippet=f"OMP_NUM_THREADS={target} python train.py\n# or: torch.set_num_threads({target})",
        knobs={"threads": target},
    )


@rule("cpu.bound", risk="data-path")
def cpu_bound(evidence: RunEvidence) -> Finding | None:
    """What: the CPU is saturated while the GPU idles.

    Why: Python-side work (data preparation, the training loop, many tiny operators) cannot
    keep the GPU fed; the GPU waits for the host.

    Fix: move work off the Python hot path (vectorise, move preprocessing into DataLoader
    workers), use more workers, or a larger batch per step.
    """
    cpu = evidence.process_values("process.cpu_percent")
    gpu = evidence.values("gpu.utilization")
    cores = usable_cores(evidence)
    if len(cpu) < MIN_SAMPLES or len(gpu) < MIN_SAMPLES or not cores:
        return None
    cpu_share = statistics.median(cpu) / (100.0 * cores)
    gpu_util = statistics.median(gpu)
    threads = evidence.fact("threads.intra_op", cores)
    saturated = cpu_share >= CPU_SATURATED_SHARE or statistics.median(cpu) >= 95.0 * min(
        threads, cores
    )
    if not saturated or gpu_util >= GPU_IDLE_UTILIZATION_PCT:
        return None
    return finding(
        "cpu.bound",
        title=f"CPU saturated while the GPU is {gpu_util:.0f}% busy",
        confidence=0.5,
        gain=(1 - gpu_util / 100.0) * 0.5,
        basis="half of the GPU's idle share, assumed recoverable by feeding it faster",
        evidence=[
            Evidence("process CPU (median)", statistics.median(cpu), "% of one core", "metrics"),
            Evidence("GPU utilisation (median)", gpu_util, "%", "metrics"),
            Evidence("usable cores", cores, "cores", "facts"),
        ],
        fix=Fix(
            text="Feed the GPU faster: more workers, less Python per step, a larger batch.",
            snippet="DataLoader(dataset, ..., num_workers=4)  # and vectorise per-sample code",
        ),
    )


HOST_BUSY_PCT = 85.0  # host-wide CPU (% of all cores) at or above this counts as busy
STARVED_SHARE = 0.6  # the job getting at most this share of the cores its threads ask
HOST_DEVICE = "host"  # host-wide series (perfweb_contract.protocol): every process on the host
LOOP_BUSY_MIN = 0.25  # a loop inside its steps/requests less than this share of the time
# mostly waits for work (a serving loop between requests): it asks for no cores


def _job_cpu_cores(evidence: RunEvidence) -> float | None:
    """Median cores the job's own processes used: main processes (every rank on this host)
    plus their DataLoader workers (`process.cpu_percent` is % of one core)."""
    main = evidence.process_values("process.cpu_percent")
    if len(main) < MIN_SAMPLES:
        return None
    workers = [
        v
        for device in evidence.devices_of("process.cpu_percent")
        if device == "workers" or device.startswith("workers:")
        for v in evidence.values("process.cpu_percent", device)
    ]
    ranks = ranks_per_host(evidence)
    cores = statistics.median(main) * ranks / 100.0
    return cores + (statistics.median(workers) * ranks / 100.0 if workers else 0.0)


@rule("cpu.host_contention", risk="system")
def cpu_host_contention(evidence: RunEvidence) -> Finding | None:
    """What: other processes on the host take the CPU cores the job needs: host-wide CPU is
    high while the job's own processes get far less CPU than their threads ask for.

    Why: the job's threads wait in the scheduler's run queue behind other work (another job,
    a build, a data-prep service); every CPU-side step (data loading, Python overhead, kernel
    launches) stretches, and the accelerator waits. No setting inside the script fixes it.

    Fix: move the job or the other work to another host, pin them to disjoint cores
    (`taskset`, cgroups/cpusets, the scheduler's CPU request), or ask for fewer threads and
    DataLoader workers so the job fits the cores it really gets.
    """
    host = evidence.values("host.cpu_percent", HOST_DEVICE)
    host_cores = evidence.fact("host.cpu_count")
    job_cores = _job_cpu_cores(evidence)
    if len(host) < MIN_SAMPLES or not isinstance(host_cores, int) or job_cores is None:
        return None
    busy_pct = statistics.median(host)
    usable = usable_cores(evidence) or host_cores
    intra = evidence.fact("threads.intra_op", usable)
    asked = float(min(usable, intra * ranks_per_host(evidence))) if isinstance(intra, int) else 0
    others = max(0.0, busy_pct / 100.0 * host_cores - job_cores)
    if busy_pct < HOST_BUSY_PCT or asked <= 0 or job_cores > STARVED_SHARE * asked:
        return None
    if others < host_cores - asked:  # the others leave the job the cores it asks: not them
        return None
    busy = loop_busy_share(evidence)
    # Without steps or requests a process using little CPU may as well be idle (waiting on
    # I/O, a lock, a sleep) as starved; and a loop that mostly waits for work asks for none.
    if busy is None or busy < LOOP_BUSY_MIN:
        return None
    got = job_cores / asked
    return finding(
        "cpu.host_contention",
        title=f"Other processes hold {others:.1f} of {host_cores} cores; the job gets "
        f"{job_cores:.1f} of the {asked:.0f} it asks for",
        confidence=0.6,
        gain=(1.0 - got) * 0.5,
        basis="half of the CPU share the job's threads ask for but do not get (assumed "
        "recoverable on an uncontended host)",
        evidence=[
            Evidence("host-wide CPU (median)", busy_pct, "% of all cores", "metrics (host)"),
            Evidence("host cores", host_cores, "cores", "facts"),
            Evidence("the job's CPU (median)", job_cores, "cores", "metrics (process)"),
            Evidence("cores the job's threads ask for", asked, "cores", "facts"),
            Evidence("cores taken by other processes", others, "cores", "metrics (host − job)"),
            Evidence("the loop's busy share", busy, "fraction", "metrics (steps)"),
        ],
        fix=Fix(
            text="Run the job where it gets its cores: move it or the other work, or pin each "
            "to its own cores.",
            snippet=pinning_snippet(evidence, cores_wanted=int(asked)),
        ),
    )
