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
from perfweb.diagnostics.models import Trace
from perfweb.diagnostics.summaries import summary_from_json, summary_is_current
from perfweb.jobs.selectors import verified_gains_for_run
from perfweb.runs.models import Run
from perfweb.series.selectors import series_read, series_span
from perfweb_recommender.evidence import RunEvidence, Series, StepSample

SERIES_POINTS = 2000
STEP_POINTS = 5000
STEP_SERIES = ("step.duration", "step.data_wait")
TRACES_PER_RANK = 8  # a long run's profiler windows add up: the latest ones describe it now


def run_evidence(*, run: Run) -> RunEvidence:
    """Everything the rules may read about `run`, from the database and analysed traces."""
    spans = series_span(run=run)
    return RunEvidence(
        facts=dict(run.facts),
        series=_series(run=run, spans=spans),
        steps=stored_steps(run=run, spans=spans),
        traces=[summary_from_json(t.summary) for t in _analysed_traces(run=run)],
        devices=_devices(run=run),
        world_size=_world_size(run=run),
        verified_gains=verified_gains_for_run(run=run),
    )


def _series(*, run: Run, spans: list[dict[str, Any]]) -> list[Series]:
    metric_spans = [s for s in spans if s["name"] not in STEP_SERIES]
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
    step_spans = [s for s in spans if s["name"] == "step.duration"]
    if not step_spans:
        return []
    end = max(s["end"] for s in step_spans)
    window = conf.diagnose_window_s()
    for span in step_spans:  # shrink the window until no rank has more than STEP_POINTS steps
        length = max(span["end"] - span["start"], 1e-9)
        if span["count"] > STEP_POINTS:
            window = min(window, length * STEP_POINTS / span["count"])
    read = series_read(run=run, names=list(STEP_SERIES), start=end - window, points=STEP_POINTS)
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
            steps.append(StepSample(rank=rank, index=index, t=t, duration_s=durations[t],
                                    data_wait_s=waits.get(t)))  # fmt: skip
    return steps


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


def _devices(*, run: Run) -> list[dict[str, Any]]:
    rows = run.devices.order_by("key").values(
        "key", "kind", "index", "name", "uuid", "memory_total", "power_limit", "extra"
    )
    return [{**(row.pop("extra") or {}), **row} for row in rows]


def _world_size(*, run: Run) -> int | None:
    sizes = [w for w in run.processes.values_list("world_size", flat=True) if w]
    return max(sizes) if sizes else None
