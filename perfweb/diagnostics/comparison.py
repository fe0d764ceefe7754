"""Reads for comparing runs: each run's step times, its latest trace tables, its findings;
the job baseline of a run; and the `run.regression` finding against that baseline.

A run's job is its `job` tag when it has one, else its name (docs/traces.md). Its baseline
is the latest run of the same job in the same project that started before it, has steps,
and did not itself regress — so a regressed run never becomes the bar the next one is held to.
"""

from __future__ import annotations

import statistics
from typing import Any
from urllib.parse import urlencode

import numpy as np
from django.db.models import Q
from django.urls import reverse

from perfweb.diagnostics.anatomy import run_anatomy
from perfweb.diagnostics.models import Finding, Trace
from perfweb.diagnostics.selectors import trace_tables_of
from perfweb.runs.models import Run
from perfweb.series.selectors import series_read
from perfweb_recommender.analysis.regression import MedianRatio, median_ratio
from perfweb_recommender.analysis.trace_diff import trace_diff
from perfweb_recommender.anatomy import phase_diff
from perfweb_recommender.compare import difference_sentence, facts_diff, findings_diff, step_stats
from perfweb_recommender.evidence import training_from
from perfweb_recommender.rules.base import Finding as RuleFinding
from perfweb_recommender.rules.cross_run import REGRESSION_ID, regression_finding

STEP_POINTS = 5000  # steps read per run (the regression verdict thins to its own maximum)
JOB_TAG = "job"
BASELINE_CANDIDATES = 20  # earlier runs of the job looked at, newest first


def job_of(run: Run) -> str:
    """The run's job: its `job` tag, else its name ("" when it has neither)."""
    tag = (run.tags or {}).get(JOB_TAG)
    return str(tag) if tag not in (None, "") else run.name


def run_steps(*, run: Run) -> tuple[list[float], list[float], list[float]]:
    """(end times, durations, DataLoader waits) of the run's steps, all ranks, in time order."""
    read = series_read(run=run, names=["step.duration", "step.data_wait"], points=STEP_POINTS)
    rows: list[tuple[float, float]] = []
    waits: list[float] = []
    # each rank's calls before its first optimizer step (an eval at iteration 0) are no
    # steps; their positions are known while the series is read whole
    first = training_from(run.facts or {}) or 0
    for series in read:
        if not series.device.startswith("rank:"):
            continue
        skip = first if not series.downsampled else 0
        if series.name == "step.duration":
            rows.extend(zip(series.t.tolist()[skip:], series.v.tolist()[skip:], strict=True))
        else:
            waits.extend(series.v.tolist()[skip:])
    rows.sort()
    return [t for t, _ in rows], [v for _, v in rows], waits


def latest_tables(*, run: Run) -> dict[str, Any] | None:
    """The trace tables of the run's newest analysed trace (lowest rank first)."""
    traces = Trace.objects.filter(run=run, summary__isnull=False).order_by("-created_at", "-id")
    for trace in traces:
        tables = trace_tables_of(trace)
        if tables is not None:
            return tables
    return None


def compare_path(*, runs: list[Run]) -> str:
    return reverse("dashboard:compare") + "?" + urlencode([("run", r.run_id) for r in runs])


def baseline_for(*, run: Run) -> Run | None:
    """The job baseline of `run` (see the module docstring), or None."""
    job = job_of(run)
    if not job:
        return None
    same_job = Q(tags__job=job) | (Q(name=job) & ~Q(tags__has_key=JOB_TAG))
    earlier = (
        Run.objects.filter(project_id=run.project_id, started_at__lt=run.started_at)
        .filter(same_job)
        .exclude(id=run.id)
        .exclude(step_count=0)
        .order_by("-started_at")[:BASELINE_CANDIDATES]
    )
    regressed = set(
        Finding.objects.filter(run__in=earlier, rule_id=REGRESSION_ID).values_list(
            "run_id", flat=True
        )
    )
    return next((r for r in earlier if r.id not in regressed and job_of(r) == job), None)


def _median_wait(waits: list[float]) -> float | None:
    return statistics.median(waits) if waits else None


def pair_comparison(*, a: Run, b: Run) -> dict[str, Any]:
    """B against A: step statistics, the ratio of medians with its interval, the sentence,
    the facts and findings that differ, and the trace diff when both have traces."""
    _, a_steps, a_waits = run_steps(run=a)
    _, b_steps, b_waits = run_steps(run=b)
    ratio = median_ratio(a=a_steps, b=b_steps)
    a_tables, b_tables = latest_tables(run=a), latest_tables(run=b)
    diff = trace_diff(a_tables, b_tables) if a_tables and b_tables else None
    a_wait, b_wait = _median_wait(a_waits), _median_wait(b_waits)
    wait_delta = b_wait - a_wait if a_wait is not None and b_wait is not None else None
    sentence = _sentence(ratio=ratio, a=a, b=b, wait_delta=wait_delta, diff=diff)
    a_anatomy, b_anatomy = run_anatomy(run=a), run_anatomy(run=b)
    phases = None
    if a_anatomy is not None and b_anatomy is not None:
        by_phase = phase_diff(a_anatomy, b_anatomy)
        phases = {**by_phase.as_json(), "text": by_phase.text(b_label=_label(b))}
    return {
        "a": a,
        "b": b,
        "a_stats": step_stats(a_steps),
        "b_stats": step_stats(b_steps),
        "ratio": ratio.as_json() if ratio else None,
        "sentence": sentence,
        "facts": facts_diff(dict(a.facts), dict(b.facts)),
        "findings": findings_diff(_finding_ids(a), _finding_ids(b)),
        "trace_diff": diff,
        "a_wait_s": a_wait,
        "b_wait_s": b_wait,
        "phases": phases,  # the step anatomy's diff (None unless both runs have phases)
    }


def _finding_ids(run: Run) -> list[str]:
    return list(Finding.objects.filter(run=run).values_list("rule_id", flat=True))


def _sentence(
    *, ratio: MedianRatio | None, a: Run, b: Run, wait_delta: float | None,
    diff: dict[str, Any] | None,
) -> str:  # fmt: skip
    if ratio is None:
        return "Too few steps in one of the runs to compare their step times."
    return difference_sentence(
        ratio=ratio,
        a_label=_label(a),
        b_label=_label(b),
        wait_delta_s=wait_delta,
        operators=(diff or {}).get("operators", []),
    )


def _label(run: Run) -> str:
    return f"{run.name or 'run'} ({run.run_id[:8]})"


def regression_for(*, run: Run) -> RuleFinding | None:
    """The `run.regression` finding of `run` against its job baseline, or None."""
    baseline = baseline_for(run=run)
    if baseline is None:
        return None
    _, base_steps, base_waits = run_steps(run=baseline)
    _, steps, waits = run_steps(run=run)
    verdict = median_ratio(a=base_steps, b=steps)
    if verdict is None or not verdict.regressed:
        return None
    a_tables, b_tables = latest_tables(run=baseline), latest_tables(run=run)
    diff = trace_diff(a_tables, b_tables) if a_tables and b_tables else None
    a_wait, b_wait = _median_wait(base_waits), _median_wait(waits)
    wait_delta = b_wait - a_wait if a_wait is not None and b_wait is not None else None
    sentence = _sentence(ratio=verdict, a=baseline, b=run, wait_delta=wait_delta, diff=diff)
    return regression_finding(
        verdict=verdict,
        baseline_run=baseline.run_id,
        compare_path=compare_path(runs=[baseline, run]),
        sentence=sentence,
    )


def thinned(values: list[float], *, points: int) -> list[float]:
    """At most `points` of `values`, evenly spaced (order kept)."""
    if len(values) <= points:
        return values
    index = np.linspace(0, len(values) - 1, points).round().astype(np.int64)
    return [values[i] for i in index]
