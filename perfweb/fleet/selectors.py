"""The waste report of a set of runs over a window: reads runs, devices, samples and top
findings, and adds up what fleet/waste.py computes per GPU."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet

from perfweb.diagnostics.models import Finding
from perfweb.diagnostics.workload import coverage_summary, runs_workload_coverage
from perfweb.errors import ClientError
from perfweb.fleet import conf
from perfweb.fleet.models import GpuPrice
from perfweb.fleet.waste import HOUR, GpuTime, core_hours, gpu_time, kwh
from perfweb.runs.models import Device, Run
from perfweb.series.recent import recent_samples
from perfweb_recommender.conditions import Series
from perfweb_recommender.coverage import Coverage
from perfweb_recommender.rules.base import HOST_CONDITION_RISK
from perfweb_recommender.rules.cross_run import REGRESSION_ID

WINDOWS = {"day": 86_400.0, "week": 7 * 86_400.0, "month": 30 * 86_400.0}
NAMES = ("gpu.utilization", "gpu.memory_used", "gpu.energy", "process.cpu_percent")
TAG_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class BadQuery(ClientError):
    """A waste query the report cannot answer (400); str() says which parameter."""


def waste_query(params: Mapping[str, str], runs: QuerySet[Run]) -> tuple[QuerySet[Run], str, str]:
    """The runs, window and tag of a waste query (`?window=week&tag=user&project=…`)."""
    window = params.get("window", "week")
    if window not in WINDOWS:
        raise BadQuery(f"window is not one of {', '.join(WINDOWS)}")
    tag = params.get("tag", "user")
    if not TAG_RE.match(tag):
        raise BadQuery("tag is not a tag name (letters, digits, _ . : -, at most 64)")
    project = params.get("project")
    if project:
        runs = runs.filter(project__name=project)
    return runs, window, tag


@dataclass
class RunWaste:
    run: Run
    gpu_model: str
    gpus: int
    time: GpuTime
    core_hours: float | None
    price: float | None  # per GPU-hour
    top_fix: dict[str, Any] | None = None
    # What the agent saw of the run (the run page's verdict): "no finding" is said only of
    # an observed run; one never examined has no top fix because nothing could be diagnosed.
    coverage: Coverage | None = None

    def cost(self, seconds: float) -> float | None:
        return None if self.price is None else seconds / HOUR * self.price


@dataclass
class Totals:
    time: GpuTime = field(default_factory=GpuTime)
    cost: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    priced: bool = False
    core_hours: float = 0.0
    runs: int = 0

    def add(self, row: RunWaste) -> None:
        self.runs += 1
        self.time.add(row.time)
        self.core_hours += row.core_hours or 0.0
        if row.price is not None:
            self.priced = True
            for key, hours in row.time.hours().items():  # busy, ..., wasted, total
                self.cost[key] += hours * row.price

    def as_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "gpu_hours": self.time.hours(),
            "cost": dict(self.cost) if self.priced else None,
            "energy_kwh": kwh(self.time.energy_joules),
            "core_hours": self.core_hours,
        }


def waste_report(
    *, runs: QuerySet[Run], window: str, now: datetime, tag: str = "user"
) -> dict[str, Any]:
    """GPU-hours of the runs over the last `window` (day, week, month), split by where they
    went, with cost, energy, core-hours of CPU-only runs and each run's top fix's share."""
    end = now.timestamp()
    start = end - WINDOWS[window]
    overlapping = (
        runs.filter(started_at__lt=now)
        .filter(
            Q(ended_at__isnull=True) | Q(ended_at__gt=datetime.fromtimestamp(start, now.tzinfo))
        )
        .select_related("project")
    )
    rows = run_waste_rows(runs=list(overlapping), start=start, end=end)
    totals = Totals()
    by_host: dict[str, Totals] = defaultdict(Totals)
    by_tag: dict[str, Totals] = defaultdict(Totals)
    for row in rows:
        totals.add(row)
        by_host[row.run.host or "(unknown host)"].add(row)
        value = row.run.tags.get(tag) if isinstance(row.run.tags, dict) else None
        by_tag[str(value) if value not in (None, "") else f"(no {tag} tag)"].add(row)
    rows.sort(key=lambda r: r.time.wasted + r.time.unattributed, reverse=True)
    recoverable = sum((r.top_fix or {}).get("recoverable_gpu_hours") or 0.0 for r in rows)
    return {
        "window": window,
        "start": start,
        "end": end,
        "currency": conf.currency(),
        **totals.as_json(),
        "recoverable_gpu_hours": recoverable,
        "runs_detail": [_run_json(row) for row in rows],
        "hosts": _groups(by_host, "host"),
        "tag": {"key": tag, "groups": _groups(by_tag, "value")},
    }


def run_waste_rows(*, runs: list[Run], start: float, end: float) -> list[RunWaste]:
    """One RunWaste per run, from two sample reads for all of them."""
    if not runs:
        return []
    samples = recent_samples(run_ids=[r.id for r in runs], names=NAMES, start=start, end=end)
    gpus = _gpu_devices(runs)
    prices = _prices(runs)
    fixes = _top_fixes(runs)
    coverage = runs_workload_coverage(runs=runs)
    rows = []
    for run in runs:
        span = (max(run.started_at.timestamp(), start), min(_run_end(run, end), end))
        series = samples.get(run.id, {})
        row = _run_row(run, series, gpus.get(run.id, {}), span)
        row.price = conf.price_for(row.gpu_model, prices[run.project_id]) if row.gpus else None
        row.top_fix = _recoverable(fixes.get(run.id), row)
        row.coverage = coverage[run.id]
        rows.append(row)
    return rows


def run_waste_summary(*, run: Run, at: datetime) -> dict[str, Any] | None:
    """One run's GPU-hours from its start until `at`, for an alert's message; None for a run
    with no GPU."""
    (row,) = run_waste_rows(runs=[run], start=run.started_at.timestamp(), end=at.timestamp())
    if not row.gpus:
        return None
    fix = row.top_fix or {}
    return {
        "gpu_hours": row.time.hours(),
        "currency": conf.currency(),
        "cost": row.cost(row.time.total),
        "wasted_cost": row.cost(row.time.wasted),
        "top_fix_id": fix.get("id"),
        "recoverable_gpu_hours": fix.get("recoverable_gpu_hours"),
    }


def _run_end(run: Run, end: float) -> float:
    if run.ended_at is not None:
        return run.ended_at.timestamp()
    return end if run.status == Run.RUNNING else run.last_seen_at.timestamp()


def _run_row(
    run: Run,
    series: dict[tuple[str, str], Series],
    gpus: dict[str, str],
    span: tuple[float, float],
) -> RunWaste:
    keys = set(gpus) | {device for device, name in series if name == "gpu.utilization"}
    total = GpuTime()
    for key in sorted(keys):
        utilization = series.get((key, "gpu.utilization"), Series(t=[], v=[]))
        total.add(
            gpu_time(
                utilization=utilization,
                memory=series.get((key, "gpu.memory_used")),
                energy=series.get((key, "gpu.energy")),
                start=span[0],
                end=span[1],
            )
        )
    cpu = None
    if not keys:  # a CPU-only run: its cores are what it used
        cpu = sum(
            core_hours(cpu_percent=s, start=span[0], end=span[1])
            for (device, name), s in series.items()
            if name == "process.cpu_percent" and device.startswith(("process", "workers"))
        )
    model = next((gpus[k] for k in sorted(gpus) if gpus[k]), "")
    return RunWaste(
        run=run, gpu_model=model, gpus=len(keys), time=total, core_hours=cpu, price=None
    )


def _gpu_devices(runs: list[Run]) -> dict[int, dict[str, str]]:
    found: dict[int, dict[str, str]] = defaultdict(dict)
    devices = Device.objects.filter(run_id__in=[r.id for r in runs], kind="gpu")
    for run_id, key, name in devices.values_list("run_id", "key", "name"):
        found[run_id][key] = name
    return found


def _prices(runs: list[Run]) -> dict[int, dict[str, float]]:
    """Per project: the settings' prices with the project's own on top."""
    defaults = conf.default_prices()
    prices: dict[int, dict[str, float]] = {r.project_id: dict(defaults) for r in runs}
    rows = GpuPrice.objects.filter(project_id__in=list(prices))
    for project_id, model, price in rows.values_list("project_id", "model", "price_per_hour"):
        prices[project_id][model] = price
    return prices


def _top_fixes(runs: list[Run]) -> dict[int, Finding]:
    """Each run's best-ranked finding that is a fix. A regression against the baseline run
    says the run got slower, not what to change, and a host condition (contention,
    throttling) is about the machine: neither saves anything by itself."""
    found: dict[int, Finding] = {}
    findings = (
        Finding.objects.filter(run_id__in=[r.id for r in runs])
        .exclude(rule_id=REGRESSION_ID)
        .exclude(risk=HOST_CONDITION_RISK)
    )
    for finding in findings.order_by("rank"):
        found.setdefault(finding.run_id, finding)
    return found


def _recoverable(finding: Finding | None, row: RunWaste) -> dict[str, Any] | None:
    if finding is None:
        return None
    verified = finding.measured_gain is not None
    gain = finding.measured_gain if verified else finding.estimated_gain
    attributed = row.time.total - row.time.unattributed
    hours = max(gain or 0.0, 0.0) * attributed / HOUR if row.gpus else None
    core = (
        max(gain or 0.0, 0.0) * row.core_hours
        if not row.gpus and row.core_hours is not None
        else None
    )
    return {
        "id": finding.rule_id,
        "title": finding.title,
        "gain": gain,
        "verified": verified,
        "recoverable_gpu_hours": hours,
        "recoverable_core_hours": core,  # a CPU-only run's: its share of the cores it used
        "recoverable_cost": None if hours is None or row.price is None else hours * row.price,
    }


def _run_json(row: RunWaste) -> dict[str, Any]:
    run = row.run
    return {
        "run_id": run.run_id,
        "name": run.name,
        "host": run.host,
        "status": run.status,
        "project": run.project.name,
        "gpus": row.gpus,
        "gpu_model": row.gpu_model,
        "gpu_hours": row.time.hours(),
        "energy_kwh": kwh(row.time.energy_joules),
        "core_hours": row.core_hours,
        "price_per_gpu_hour": row.price,
        "cost": None if row.price is None else row.time.total / HOUR * row.price,
        "wasted_cost": row.cost(row.time.wasted),
        "top_fix": row.top_fix,
        "coverage": None if row.coverage is None else coverage_summary(row.coverage),
        # why a run has no energy figure: no GPU at all, or GPUs without NVML's counter
        "energy_note": None
        if row.time.energy_joules is not None
        else (
            "CPU-only run: no energy counter"
            if not row.gpus
            else "no NVML energy counter on these GPUs"
        ),
    }


def _groups(groups: dict[str, Totals], key: str) -> list[dict[str, Any]]:
    ordered = sorted(groups.items(), key=lambda item: item[1].time.total, reverse=True)
    return [{key: name, **totals.as_json()} for name, totals in ordered]
