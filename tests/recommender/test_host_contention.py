"""`cpu.host_contention`: other processes on the host take the cores the job asks for."""

from __future__ import annotations

from perfweb_recommender.evidence import RunEvidence, Series, StepSample
from perfweb_recommender.rules.cpu import cpu_host_contention


def _run(
    *,
    host_pct: float,
    job_pct: float,
    workers_pct: float | None = None,
    threads: int = 8,
    cores: int = 16,
    samples: int = 30,
) -> RunEvidence:
    t = [1000.0 + i for i in range(samples)]
    series = [
        Series("host", "host.cpu_percent", t, [host_pct] * samples),
        Series("process", "process.cpu_percent", t, [job_pct] * samples),
    ]
    if workers_pct is not None:
        series.append(Series("workers", "process.cpu_percent", t, [workers_pct] * samples))
    facts = {"host.cpu_count": cores, "host.usable_cores": cores, "threads.intra_op": threads}
    steps = [StepSample(0, i, t[i], 1.0) for i in range(samples)]  # back to back: busy
    return RunEvidence(facts=facts, series=series, steps=steps)


def _evidence(found: object) -> dict[str, float]:
    return {e.label: e.value for e in found.evidence}  # type: ignore[attr-defined]


def test_it_fires_when_other_processes_take_the_cores_the_job_asks_for() -> None:
    # 16 cores 95% busy; the job's 8 threads get 2 cores: others hold 13.2 cores.
    found = cpu_host_contention(_run(host_pct=95.0, job_pct=200.0))
    assert found is not None and found.id == "cpu.host_contention" and found.risk == "system"
    numbers = _evidence(found)
    assert numbers["host-wide CPU (median)"] == 95.0
    assert numbers["the job's CPU (median)"] == 2.0
    assert numbers["cores the job's threads ask for"] == 8.0
    assert abs(numbers["cores taken by other processes"] - 13.2) < 1e-9
    assert found.estimated_gain == (1 - 2.0 / 8.0) * 0.5
    assert "13.2 of 16 cores" in found.title and "2.0 of the 8" in found.title


def test_it_counts_the_jobs_dataloader_workers_as_the_job() -> None:
    # The workers use 6 cores: the job gets 8 of its 8, the host is busy with the job itself.
    assert cpu_host_contention(_run(host_pct=95.0, job_pct=200.0, workers_pct=600.0)) is None


def test_it_stays_quiet_when_the_job_itself_keeps_the_host_busy() -> None:
    assert cpu_host_contention(_run(host_pct=98.0, job_pct=790.0)) is None


def test_it_stays_quiet_when_the_host_has_idle_cores() -> None:
    # A job waiting on I/O uses little CPU, but nothing else is taking the cores.
    assert cpu_host_contention(_run(host_pct=20.0, job_pct=100.0)) is None


def test_it_stays_quiet_when_the_others_leave_the_job_its_cores() -> None:
    # 64 cores 90% busy, but the job asks for 2 threads and the others leave it 6.4 cores.
    assert cpu_host_contention(_run(host_pct=90.0, job_pct=50.0, threads=2, cores=64)) is None


def test_it_needs_host_wide_samples() -> None:
    evidence = _run(host_pct=95.0, job_pct=200.0, samples=3)
    assert cpu_host_contention(evidence) is None
    no_host = _run(host_pct=95.0, job_pct=200.0)
    no_host.series = [s for s in no_host.series if s.device != "host"]
    assert cpu_host_contention(no_host) is None


def test_it_stays_quiet_without_steps_or_requests() -> None:
    # A process using little CPU with no loop in sight may be idle (I/O, a sleep), not starved.
    evidence = _run(host_pct=97.0, job_pct=30.0)
    evidence.steps = []
    assert cpu_host_contention(evidence) is None


def test_it_stays_quiet_when_a_serving_loop_mostly_waits_for_requests() -> None:
    # 50 requests of 1 ms over 5 s: the loop sleeps between them and asks for no cores.
    evidence = _run(host_pct=97.0, job_pct=30.0)
    evidence.steps = [StepSample(0, i, 1000.0 + 0.1 * i, 0.001) for i in range(50)]
    assert cpu_host_contention(evidence) is None
    evidence.steps = [StepSample(0, i, 1000.0 + 0.1 * i, 0.1) for i in range(50)]  # back to back
    found = cpu_host_contention(evidence)
    assert found is not None
    assert abs(_evidence(found)["the loop's busy share"] - 1.0) < 1e-9
