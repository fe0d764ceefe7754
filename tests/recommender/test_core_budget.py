"""One CPU core budget: the CPU-side fixes shown together for one run fit the host's cores
together, and applying them does not make another CPU rule fire next."""

from __future__ import annotations

import itertools
import re

import pytest

from perfweb_recommender.evidence import RunEvidence, StepSample
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
