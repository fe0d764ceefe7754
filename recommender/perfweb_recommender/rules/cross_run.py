"""Findings about a run against other runs of the same job (not in `REGISTRY`: a rule there
reads one run's evidence; these need a second run, which the server's adapter supplies).

`run.regression`: the run's median step time (or request latency) is worse than its job's
baseline run beyond the noise (`perfweb_recommender.analysis.regression`).
"""

from __future__ import annotations

import inspect

from perfweb_recommender.analysis.regression import MedianRatio
from perfweb_recommender.rules.base import Evidence, Finding, Fix

REGRESSION_ID = "run.regression"
REGRESSION_CONFIDENCE = 0.8  # the interval says "slower"; that the cause is fixable, less so


def run_regression_doc() -> None:
    """What: this run's median step time (or request latency) is worse than the baseline run
    of the same job (same run name, or the same `job` tag) by more than the noise: the whole
    95 % bootstrap interval of the medians' ratio lies above +2 %.

    Why: the same job got slower — a code or dependency change, another DataLoader or thread
    setting, a different host or GPU, a data change. The baseline is the latest earlier run
    of the job that did not itself regress.

    Fix: open the comparison with the baseline run: the facts that differ, the findings that
    appeared, and the operators and kernels that got slower say what changed."""


DOCS = {REGRESSION_ID: inspect.cleandoc(run_regression_doc.__doc__ or "")}
RISK = {REGRESSION_ID: "system"}


def regression_finding(
    *, verdict: MedianRatio, baseline_run: str, compare_path: str, sentence: str
) -> Finding | None:
    """The `run.regression` finding when `verdict` says regressed, else None."""
    if not verdict.regressed:
        return None
    slower = verdict.ratio - 1
    return Finding(
        id=REGRESSION_ID,
        title=f"Regressed vs run {baseline_run[:12]}: median step {100 * slower:.0f}% slower",
        risk=RISK[REGRESSION_ID],
        confidence=REGRESSION_CONFIDENCE,
        estimated_gain=max(0.0, min(1.0, 1 - 1 / verdict.ratio)),
        gain_basis="back to the baseline run's median step time",
        evidence=[
            Evidence("median step, this run", verdict.b_median, "s", "metrics"),
            Evidence("median step, baseline run", verdict.a_median, "s", f"run {baseline_run}"),
            Evidence("ratio, 95% interval low", round(verdict.low, 4), "×", "bootstrap"),
            Evidence("ratio, 95% interval high", round(verdict.high, 4), "×", "bootstrap"),
            Evidence("baseline run", baseline_run, "", compare_path),
        ],
        fix=Fix(text=f"{sentence} Compare the two runs: {compare_path}"),
        doc=DOCS[REGRESSION_ID],
    )
