"""The latest state of a project's live runs, as plain numbers: what the Prometheus export
shows. Reads the stored series through the batched reader the alert evaluator uses too
(perfweb.series.recent: two queries for all runs), so a scrape costs the same whatever the
number of runs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from django.db.models import Count
from django.utils import timezone

from perfweb.diagnostics.evidence import device_rows
from perfweb.diagnostics.models import Finding
from perfweb.projects.models import Project
from perfweb.runs.models import Run
from perfweb.series.recent import recent_samples
from perfweb_contract import protocol
from perfweb_contract.protocol import STEP_DATA_WAIT, STEP_DURATION
from perfweb_recommender.compute import utilisation
from perfweb_recommender.conditions import Series
from perfweb_recommender.coverage import workload_kind
from perfweb_recommender.evidence import RunEvidence

# stored metric -> (exported name, help). Gauges of the latest sample of each device.
LATEST_GAUGES: dict[str, tuple[str, str]] = {
    "gpu.utilization": ("perfweb_gpu_utilization_percent", "GPU busy time (NVML), percent"),
    "gpu.memory_used": ("perfweb_gpu_memory_used_bytes", "GPU memory in use (NVML), bytes"),
    "gpu.power": ("perfweb_gpu_power_watts", "GPU power draw (NVML), watts"),
    "gpu.temperature": ("perfweb_gpu_temperature_celsius", "GPU temperature (NVML), °C"),
    "gpu.sm_clock": ("perfweb_gpu_sm_clock_mhz", "GPU SM clock (NVML), MHz"),
    "process.cpu_percent": ("perfweb_process_cpu_percent", "process CPU, percent of one core"),
    "process.rss": ("perfweb_process_rss_bytes", "process resident memory, bytes"),
}
LATEST_WINDOW_S = 120.0  # a device silent for longer is not reported
STEP_WINDOW_S = 60.0  # step time, data-wait share and latency percentiles are over this
QUANTILES = (0.5, 0.95, 0.99)
_DEVICE = re.compile(r"^(?P<kind>gpu|process|workers|rank):(?P<index>\d+)(?::(?P<node>.+))?$")


@dataclass(frozen=True)
class RunLabels:
    run: str
    run_name: str
    host: str
    kind: str  # training | inference | unknown


@dataclass
class DeviceValue:
    run: RunLabels
    device: str
    gpu: str
    rank: str
    value: float


@dataclass
class ScalarValue:
    """The latest value of one scalar the script logs (`scalar.<name>`), per rank."""

    run: RunLabels
    rank: str
    name: str  # without the `scalar.` prefix
    value: float


@dataclass
class StepStats:
    run: RunLabels
    rank: str
    quantiles: dict[float, float]
    data_wait_share: float | None


@dataclass(frozen=True)
class PhaseValue:
    """The median over the last minute of one phase of the step anatomy, per rank."""

    run: RunLabels
    rank: str
    phase: str  # perfweb_contract.protocol.STEP_PHASES
    seconds: float


@dataclass
class Snapshot:
    project: str
    runs: list[RunLabels] = field(default_factory=list)
    runs_by_status: dict[str, int] = field(default_factory=dict)
    latest: dict[str, list[DeviceValue]] = field(default_factory=dict)  # by stored metric
    steps: list[StepStats] = field(default_factory=list)
    scalars: list[ScalarValue] = field(default_factory=list)
    phases: list[PhaseValue] = field(default_factory=list)
    mfu: list[tuple[RunLabels, str, float]] = field(default_factory=list)  # run, rank, MFU
    findings: list[tuple[RunLabels, str, str, float]] = field(default_factory=list)


def device_labels(device: str) -> tuple[str, str]:
    """(gpu, rank) label values of a stored device key: `gpu:1` → ("1", ""),
    `process:3` / `rank:3` → ("", "3"); other keys → ("", "")."""
    match = _DEVICE.match(device)
    if match is None:
        return "", ""
    if match["kind"] == "gpu":
        return match["index"], ""
    return "", match["index"]


def fleet_snapshot(*, project: Project, now: float | None = None) -> Snapshot:
    """The project's running runs: latest device values, step statistics and findings."""
    end = timezone.now().timestamp() if now is None else now
    snapshot = Snapshot(project=project.name)
    counts = Run.objects.filter(project=project).values_list("status").annotate(n=Count("id"))
    snapshot.runs_by_status = {status: n for status, n in counts}
    live = list(Run.objects.filter(project=project, status=Run.RUNNING).order_by("id"))
    labels = {run.id: _labels(run) for run in live}
    live_runs = {run.id: run for run in live}
    snapshot.runs = list(labels.values())
    phase_names = [protocol.step_phase_series(phase) for phase in protocol.STEP_PHASES]
    names = [*LATEST_GAUGES, STEP_DURATION, STEP_DATA_WAIT, *phase_names]
    recent = recent_samples(
        run_ids=labels,
        names=names,
        start=end - LATEST_WINDOW_S,
        end=end,
        prefix=protocol.SCALAR_PREFIX,
    )
    for run_id, series in sorted(recent.items()):
        run = labels[run_id]
        for (device, name), samples in sorted(series.items()):
            if name in LATEST_GAUGES and samples.v:
                gpu, rank = device_labels(device)
                value = DeviceValue(run, device, gpu, rank, samples.v[-1])
                snapshot.latest.setdefault(name, []).append(value)
            elif name.startswith(protocol.SCALAR_PREFIX) and samples.v:
                _gpu, rank = device_labels(device)
                short = name[len(protocol.SCALAR_PREFIX) :]
                snapshot.scalars.append(ScalarValue(run, rank, short, samples.v[-1]))
            elif name.startswith(protocol.STEP_PHASE_PREFIX):
                phase = _phase_median(run, device, name, samples, end)
                if phase is not None:
                    snapshot.phases.append(phase)
            elif name == STEP_DURATION:
                waits = series.get((device, STEP_DATA_WAIT))
                stats = _step_stats(run, device, samples, waits, end)
                if stats is not None:
                    snapshot.steps.append(stats)
                    mfu = _mfu(live_runs[run_id], stats.quantiles[0.5])
                    if mfu is not None:
                        snapshot.mfu.append((run, stats.rank, mfu))
    rows = Finding.objects.filter(run_id__in=labels).order_by("run_id", "rank")
    columns = ("run_id", "rule_id", "risk", "estimated_gain")
    for run_id, rule_id, risk, gain in rows.values_list(*columns):
        snapshot.findings.append((labels[run_id], rule_id, risk, gain))
    return snapshot


def _labels(run: Run) -> RunLabels:
    """The run's labels; `kind` as every other page labels it (perfweb_recommender.coverage)."""
    facts = run.facts if isinstance(run.facts, dict) else {}
    return RunLabels(
        run=run.run_id,
        run_name=run.name,
        host=run.host,
        kind=workload_kind(facts=facts, steps=run.step_count) or "unknown",
    )


def _mfu(run: Run, step_s: float) -> float | None:
    """The run's MFU at this median step (perfweb_recommender.compute), None when unknown."""
    facts = run.facts if isinstance(run.facts, dict) else {}
    if not facts.get("flops.per_step"):
        return None
    evidence = RunEvidence(facts=facts, devices=device_rows(run=run))
    return utilisation(evidence, step_s=step_s).mfu


def _phase_median(
    run: RunLabels, device: str, name: str, samples: Series, end: float
) -> PhaseValue | None:
    t, v = np.asarray(samples.t), np.asarray(samples.v)
    v = v[t >= end - STEP_WINDOW_S]
    if v.size == 0:
        return None
    phase = name[len(protocol.STEP_PHASE_PREFIX) :]
    return PhaseValue(run, device_labels(device)[1], phase, float(np.median(v)))


def _step_stats(
    run: RunLabels, device: str, samples: Series, waits: Series | None, end: float
) -> StepStats | None:
    t, durations = np.asarray(samples.t), np.asarray(samples.v)
    durations = durations[t >= end - STEP_WINDOW_S]
    if durations.size == 0:
        return None
    quantiles = {q: float(np.quantile(durations, q)) for q in QUANTILES}
    share = None
    total = float(durations.sum())
    if waits is not None and waits.v and total > 0:
        wait_t, wait_v = np.asarray(waits.t), np.asarray(waits.v)
        share = min(float(wait_v[wait_t >= end - STEP_WINDOW_S].sum()) / total, 1.0)
    return StepStats(run, device_labels(device)[1], quantiles, share)
