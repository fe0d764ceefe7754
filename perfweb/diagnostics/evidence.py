"""Stored data -> `perfweb_recommender.evidence.RunEvidence` (reads only).

Bounded: each series is read over the last `conf.diagnose_window_s()` of the run's data,
at most `SERIES_POINTS` points (MinMaxLTTB), and steps over a window short enough to hold at
most `STEP_POINTS` raw steps per rank, and the latest `TRACES_PER_RANK` analysed traces of
each rank, so a week-long run costs what a short one does.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from perfweb.diagnostics import conf
from perfweb.diagnostics.gains import verified_gains_for_run
from perfweb.diagnostics.models import Trace
from perfweb.diagnostics.summaries import summary_from_json, summary_is_current
from perfweb.runs.models import Run
from perfweb.series.selectors import series_read, series_span
from perfweb_contract.protocol import STEP_PHASE_PREFIX
from perfweb_recommender.evidence import ProcessSeen, RunEvidence, Series, StepSample

SERIES_POINTS = 2000
STEP_POINTS = 5000
STEP_SERIES = ("step.duration", "step.data_wait")
TRACES_PER_RANK = 8  # a long run's profiler windows add up: the latest ones describe it now


def run_evidence(*, run: Run) -> RunEvidence:
    """Everything the rules may read about `run`, from the database and analysed traces."""
    spans = series_span(run=run)
    steps = stored_steps(run=run, spans=spans)
    evidence = RunEvidence(
        facts=dict(run.facts),
        series=_series(run=run, spans=spans) + step_phases(run=run, spans=spans),
        steps=steps,
        traces=[summary_from_json(t.summary) for t in _analysed_traces(run=run)],
        devices=device_rows(run=run),
        world_size=_world_size(run=run),
        verified_gains=verified_gains_for_run(run=run),
        processes=_processes(run=run),
        command=[str(part) for part in run.command or []],
    )
    if _from_the_first_step(spans=spans, steps=steps):  # indices are the agent's own
        evidence.relabel_pre_training_calls()
    return evidence


def _from_the_first_step(*, spans: list[dict[str, Any]], steps: list[StepSample]) -> bool:
    """Whether `steps` hold every stored step of every rank, so that their positions are the
    agent's step indices (a long run's latest window starts somewhere in the middle)."""
    read: dict[int, int] = defaultdict(int)
    for step in steps:
        read[step.rank] += 1
    counts = [(s["device"], s["count"]) for s in spans if s["name"] == "step.duration"]
    return bool(counts) and all(read[_rank_of(device)] == count for device, count in counts)


def _processes(*, run: Run) -> list[ProcessSeen]:
    """Every agent of the run: which host it ran on, as launcher or as which rank."""
    rows = run.processes.values_list("host", "role", "rank", "local_rank")
    return [
        ProcessSeen(host=host, role=role, rank=rank, local_rank=local_rank)
        for host, role, rank, local_rank in rows
    ]


def _series(*, run: Run, spans: list[dict[str, Any]]) -> list[Series]:
    metric_spans = [
        s
        for s in spans
        if s["name"] not in STEP_SERIES and not s["name"].startswith(STEP_PHASE_PREFIX)
    ]
    if not metric_spans:
        return []
    end = max(s["end"] for s in metric_spans)
    read = series_read(
        run=run,
        names=sorted({s["name"] for s in metric_spans}),
        start=end - conf.diagnose_window_s(),
        points=SERIES_POINTS,
    )
    return [Series(s.device, s.name, s.t.tolist(), s.v.tolist()) for s in read if len(s.t)]


def stored_steps(*, run: Run, spans: list[dict[str, Any]]) -> list[StepSample]:
    """The raw steps (requests) of every rank over the latest window that holds at most
    STEP_POINTS of them per rank (`spans`: the run's series_span)."""
    start = _steps_window(spans)
    if start is None:
        return []
    read = series_read(run=run, names=list(STEP_SERIES), start=start, points=STEP_POINTS)
    columns: dict[str, dict[str, dict[float, float]]] = defaultdict(dict)
    for series in read:
        columns[series.device][series.name] = dict(
            zip(series.t.tolist(), series.v.tolist(), strict=True)
        )
    steps: list[StepSample] = []
    for device, by_name in sorted(columns.items()):
        rank = _rank_of(device)
        durations = by_name.get("step.duration", {})
        waits = by_name.get("step.data_wait", {})
        for index, t in enumerate(sorted(durations)):
            steps.append(
                StepSample(
                    rank=rank, index=index, t=t, duration_s=durations[t], data_wait_s=waits.get(t)
                )
            )
    return steps


def step_phases(*, run: Run, spans: list[dict[str, Any]]) -> list[Series]:
    """The step anatomy's series (`step.phase.<phase>`), raw over the window of the steps
    that `stored_steps` reads, so that each value meets its step at the same time."""
    names = sorted({s["name"] for s in spans if s["name"].startswith(STEP_PHASE_PREFIX)})
    start = _steps_window(spans)
    if not names or start is None:
        return []
    read = series_read(run=run, names=names, start=start, points=STEP_POINTS)
    return [Series(s.device, s.name, s.t.tolist(), s.v.tolist()) for s in read if len(s.t)]


def _steps_window(spans: list[dict[str, Any]]) -> float | None:
    """Where the steps' window starts: the latest that holds at most STEP_POINTS raw steps
    per rank (None without steps)."""
    step_spans = [s for s in spans if s["name"] == "step.duration"]
    if not step_spans:
        return None
    end = max(s["end"] for s in step_spans)
    window = conf.diagnose_window_s()
    for span in step_spans:  # shrink the window until no rank has more than STEP_POINTS steps
        length = max(span["end"] - span["start"], 1e-9)
        if span["count"] > STEP_POINTS:
            window = min(window, length * STEP_POINTS / span["count"])
    return end - window


def _rank_of(device: str) -> int:
    _, _, number = device.partition(":")
    return int(number) if number.isdigit() else 0


def _analysed_traces(*, run: Run) -> list[Trace]:
    """The latest TRACES_PER_RANK analysed profiler windows of each rank, oldest first."""
    traces = Trace.objects.filter(run=run, summary__isnull=False).order_by("-created_at", "-id")
    kept: dict[int | None, list[Trace]] = defaultdict(list)
    for trace in traces.iterator():
        if len(kept[trace.rank]) < TRACES_PER_RANK and summary_is_current(trace.summary):
            kept[trace.rank].append(trace)
    return sorted((t for group in kept.values() for t in group), key=lambda t: (t.rank or 0, t.id))


def device_rows(*, run: Run) -> list[dict[str, Any]]:
    """The run's devices as the agent described them (protocol `devices`)."""
    rows = run.devices.order_by("key").values(
        "key", "kind", "index", "name", "uuid", "memory_total", "power_limit", "extra"
    )
    return [{**(row.pop("extra") or {}), **row} for row in rows]


def _world_size(*, run: Run) -> int | None:
    sizes = [w for w in run.processes.values_list("world_size", flat=True) if w]
    return max(sizes) if sizes else None
