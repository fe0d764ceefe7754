"""One CPU core budget: the CPU-side fixes shown together for one run fit the host's cores
together, and applying them does not make another CPU rule fire next."""

from __future__ import annotations

import itertools
import re

import pytest

from perfweb_recommender.evidence import RunEvidence, Series, StepSample
from perfweb_recommender.rules import diagnose
from perfweb_recommender.rules.base import Finding

CPU_RULES = (
    "cpu.thread_oversubscription",
    "cpu.threads_too_few",
    "dataloader.num_workers",
    "dataloader.too_many_workers",
)


def _run(*, cores: int, ranks: int, intra: int, workers: int, wait: float) -> RunEvidence:
    steps = [StepSample(0, i, 1000.0 + i * 0.1, 0.1, 0.1 * wait) for i in range(30)]
    return RunEvidence(
        facts={
            "host.usable_cores": cores,
            "env.local_world_size": str(ranks),
            "threads.intra_op": intra,
            "dataloader.0.num_workers": workers,
            "dataloader.0.batch_size": 32,
            "dataloader.0.persistent_workers": True,
        },
        steps=steps,
    )


def _applied(findings: list[Finding], *, intra: int, workers: int) -> tuple[int, int]:
    """The thread and worker counts once every fix shown is applied (knob and snippet)."""
    for found in findings:
        shown = f"{found.fix.knob or ''}\n{found.fix.snippet}"
        for value in re.findall(r"threads=(\d+)|set_num_threads\((\d+)\)", shown):
            intra = int(value[0] or value[1])
        for value in re.findall(r"num_workers=(\d+)", shown):
            workers = int(value)
    return intra, workers


# Every host where a rank has at least two cores (with one, a worker and a thread cannot be
# kept apart).
HOSTS = [
    host
    for host in itertools.product(
        (2, 4, 8, 16, 64),  # cores
        (1, 2, 4),  # ranks on the host
        (1, 2, 4, 16, 64),  # intra-op threads
        (0, 1, 4, 12),  # DataLoader workers per rank
        (0.0, 0.3),  # share of the step waiting on data
    )
    if host[0] // host[1] >= 2
]


@pytest.mark.parametrize(("cores", "ranks", "intra", "workers", "wait"), HOSTS)
def test_the_cpu_fixes_shown_together_fit_one_core_budget(
    cores: int, ranks: int, intra: int, workers: int, wait: float
) -> None:
    findings = diagnose(_run(cores=cores, ranks=ranks, intra=intra, workers=workers, wait=wait))
    shown = [f for f in findings if f.id in CPU_RULES]
    new_intra, new_workers = _applied(shown, intra=intra, workers=workers)
    if (new_intra, new_workers) != (intra, workers):  # what the fixes propose fits the host
        assert ranks * (new_intra + new_workers) <= cores, [f.fix.text for f in shown]
    # Accepting them all is a fixed point: no CPU rule then proposes other counts.
    again = diagnose(
        _run(cores=cores, ranks=ranks, intra=new_intra, workers=new_workers, wait=wait)
    )
    shown_again = [f for f in again if f.id in CPU_RULES]
    assert _applied(shown_again, intra=new_intra, workers=new_workers) == (
        new_intra,
        new_workers,
    ), [f.fix.text for f in shown_again]


def test_the_demo_host_gets_workers_and_threads_that_agree() -> None:
    """The demo: 2 cores, torch's default 2 threads, num_workers=0, a data-bound loop. The
    workers fix makes room for itself instead of oversubscribing the host."""
    findings = diagnose(_run(cores=2, ranks=1, intra=2, workers=0, wait=0.4))
    workers = next(f for f in findings if f.id == "dataloader.num_workers")
    assert workers.fix.knob == "num_workers=1"
    assert "torch.set_num_threads(1)" in workers.fix.snippet
    assert "cpu.thread_oversubscription" not in {f.id for f in findings}
    after = diagnose(_run(cores=2, ranks=1, intra=1, workers=1, wait=0.4))
    assert not {f.id for f in after} & {
        "cpu.thread_oversubscription",
        "dataloader.too_many_workers",
    }


def test_a_loop_that_mostly_waits_on_its_workers_is_never_told_to_use_fewer() -> None:
    """2 workers on 2 cores and a loop that waits 80% of each step (a CPU-bound loader whose
    cause a busy host hid): the budget's spare core would go to a thread that waits, so the
    fix keeps the workers and names cheaper samples; at a 20% wait the split still applies."""
    waiting = next(
        f
        for f in diagnose(_run(cores=2, ranks=1, intra=1, workers=2, wait=0.8))
        if f.id == "dataloader.num_workers"
    )
    assert waiting.fix.knob is None and "cheaper" in waiting.fix.text
    computing = next(
        f
        for f in diagnose(_run(cores=2, ranks=1, intra=1, workers=2, wait=0.2))
        if f.id == "dataloader.num_workers"
    )
    assert computing.fix.knob == "num_workers=1"


def test_too_many_workers_is_not_blamed_on_the_threads() -> None:
    findings = diagnose(_run(cores=8, ranks=2, intra=2, workers=8, wait=0.0))
    ids = [f.id for f in findings]
    assert "dataloader.too_many_workers" in ids
    assert "cpu.thread_oversubscription" not in ids


def test_too_few_threads_on_a_cpu_bound_run() -> None:
    findings = diagnose(_run(cores=16, ranks=1, intra=1, workers=0, wait=0.0))
    few = next(f for f in findings if f.id == "cpu.threads_too_few")
    assert few.fix.knob == "threads=16"
    assert few.prior and few.estimated_gain < 0.1
    busy = diagnose(_run(cores=16, ranks=1, intra=16, workers=0, wait=0.0))
    assert "cpu.threads_too_few" not in {f.id for f in busy}


def _single_thread_run(  # noqa: ANN001
    make_summary, *, cpu: float, waited: float, gemm: float = 0.85
) -> RunEvidence:
    """bench/unseen/p8_single_thread.py's shape: an MLP trained on 1 thread of 2 cores, no
    loader, a CPU trace with 85% of its steps in GEMMs; `cpu` % of a core used and `waited`
    % of the main thread's time on a run queue (what two busy processes beside it take)."""
    evidence = _run(cores=2, ranks=1, intra=1, workers=0, wait=0.0)
    evidence.facts = {k: v for k, v in evidence.facts.items() if not k.startswith("dataloader")}
    times = [1000.0 + i for i in range(10)]
    evidence.series = [
        Series("process", "process.cpu_percent", times, [cpu] * 10),
        Series("process", "process.run_queue_wait", times, [waited] * 10),
    ]
    evidence.traces = [
        make_summary(
            launch={"kernels": 0},
            cpu_ops={"ops_per_step": 40.0, "median_op_us": 90.0, "parallel_share": gemm},
        )
    ]
    return evidence


def test_one_thread_of_two_cores_is_measured_from_the_traces_gemm_share(make_summary) -> None:  # noqa: ANN001
    """1 of 2 threads is worth a finding when the steps are GEMMs (it was never judged: the
    rule wanted two idle cores). The gain is the GEMMs' measured share x the idle half x the
    scaling, on a quiet host and beside two busy processes alike: there the loop's thread
    runs 62% of the time and waits 38% on a run queue, which is still a CPU-bound loop."""
    for cpu, waited in ((99.0, 1.0), (62.0, 38.0)):
        few = next(
            f
            for f in diagnose(_single_thread_run(make_summary, cpu=cpu, waited=waited))
            if f.id == "cpu.threads_too_few"
        )
        assert few.fix.knob == "threads=2"
        assert few.gain_basis.startswith("measured: 85% of the profiled steps in GEMMs")
        assert few.estimated_gain == pytest.approx(0.85 * 0.5 * 0.8)
    idle = diagnose(_single_thread_run(make_summary, cpu=40.0, waited=2.0))
    assert "cpu.threads_too_few" not in {f.id for f in idle}  # it waits on something else
    tiny = diagnose(_single_thread_run(make_summary, cpu=99.0, waited=1.0, gemm=0.1))
    assert "cpu.threads_too_few" not in {f.id for f in tiny}  # 4%: its steps hardly split


def _loading_run(
    *, wait: float, thread_cpu: float, queued: float = 1.0, workers: int = 0
) -> RunEvidence:
    """A loop on 2 cores waiting `wait` of each step on its loader, whose main thread ran
    `thread_cpu` % of the wall time and waited `queued` % on a run queue (schedstat)."""
    evidence = _run(cores=2, ranks=1, intra=1, workers=workers, wait=wait)
    times = [1000.0 + i for i in range(10)]
    evidence.series = [
        Series("process", "process.thread_cpu", times, [thread_cpu] * 10),
        Series("process", "process.run_queue_wait", times, [queued] * 10),
    ]
    return evidence


def _workers_finding(evidence: RunEvidence) -> Finding:
    return next(f for f in diagnose(evidence) if f.id == "dataloader.num_workers")


def test_the_workers_gain_is_what_the_proposed_workers_can_hide() -> None:
    """examples/bottleneck_dataloader.py's shape: 95% of each step waits on a loader whose
    samples sleep 2 ms (the main thread runs 6% of the time). One worker would only overlap
    the 5% of compute (measured by hand: 100 steps 3.65 s with none, 3.62 s with 1, 1.84 s
    with 2, 0.56 s with 16, 2026-12-06), so the rule proposes enough sleeping workers to hide
    the wait, past the 2 cores, and claims what they hide (16: 0.85; by hand 0.85)."""
    sleeping = _workers_finding(_loading_run(wait=0.95, thread_cpu=6.0))
    assert sleeping.fix.knob == "num_workers=16"
    load, compute = 0.95 / 16, 0.05
    assert sleeping.estimated_gain == pytest.approx(0.9 * (1 - max(load, compute)))
    assert "16 worker(s) load a batch in 6% of today's step" in sleeping.gain_basis
    # On a busy host each wake-up from the sleep waits for a core (40% of the wall time on a
    # run queue, as a CI host with three test workers can): still a sleeping loader, whose
    # workers would each take 9% of a core: 11 fit beside the training process.
    busy = _workers_finding(_loading_run(wait=0.95, thread_cpu=9.0, queued=40.0))
    assert busy.fix.knob == "num_workers=11"
    # A loader that computes (its thread runs all the time) gets the core budget's 1 worker,
    # and the gain of 1 worker beside 5% of compute: the compute it overlaps, no more.
    computing = _workers_finding(_loading_run(wait=0.95, thread_cpu=99.0))
    assert computing.fix.knob == "num_workers=1"
    assert computing.estimated_gain == pytest.approx(0.9 * 0.05)


def test_the_demo_defaults_get_one_split_from_every_cpu_rule() -> None:
    """examples/demo_train.py as scripts/start.sh runs it on the 2-core machine: 2 workers,
    torch's 2 threads, 20% of each step waiting on data (measured: 19.7%). The workers fix and
    the oversubscription fix shown together propose the same split: 1 worker, 1 thread."""
    findings = diagnose(_run(cores=2, ranks=1, intra=2, workers=2, wait=0.2))
    shown = {f.id: f for f in findings if f.id in CPU_RULES}
    assert set(shown) == {"dataloader.num_workers", "cpu.thread_oversubscription"}
    assert shown["dataloader.num_workers"].fix.knob == "num_workers=1"
    assert shown["cpu.thread_oversubscription"].fix.knob == "threads=1"
    assert "torch.set_num_threads(1)" in shown["dataloader.num_workers"].fix.snippet
