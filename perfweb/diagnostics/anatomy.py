"""A stored run's step anatomy (perfweb_recommender.anatomy over its raw steps and phase
series), the phases' rolling medians the run page stacks on its timeline, and the run's
achieved FLOP/s and MFU (perfweb_recommender.compute)."""

from __future__ import annotations

from typing import Any

import numpy as np

from perfweb.diagnostics.evidence import device_rows, step_phases, stored_steps
from perfweb.diagnostics.step_bands import BANDS, MIN_WINDOW, RAW_STEPS
from perfweb.runs.models import Run
from perfweb.series.selectors import series_read, series_span
from perfweb_contract import protocol
from perfweb_recommender.anatomy import Anatomy, step_anatomy
from perfweb_recommender.compute import Utilisation, utilisation
from perfweb_recommender.evidence import RunEvidence


def run_anatomy(*, run: Run) -> Anatomy | None:
    """The run's step anatomy over the steps the diagnosis reads; None without phases."""
    spans = series_span(run=run)
    if not any(s["name"].startswith(protocol.STEP_PHASE_PREFIX) for s in spans):
        return None
    evidence = RunEvidence(
        steps=stored_steps(run=run, spans=spans), series=step_phases(run=run, spans=spans)
    )
    return step_anatomy(evidence)


def run_utilisation(*, run: Run) -> Utilisation:
    """The run's achieved FLOP/s and MFU, or why they are absent."""
    facts = dict(run.facts or {})
    if not facts.get("flops.per_step"):
        return utilisation(RunEvidence(facts=facts))  # says why, without reading the steps
    evidence = RunEvidence(
        facts=facts,
        steps=stored_steps(run=run, spans=series_span(run=run)),
        devices=device_rows(run=run),
    )
    return utilisation(evidence)


def phase_bands(*, run: Run) -> list[dict[str, Any]]:
    """Per rank and phase: the rolling median of the phase over windows of equal step count
    (the step bands' windows: the same steps in each window of every phase)."""
    names = [protocol.step_phase_series(phase) for phase in protocol.STEP_PHASES]
    result = []
    for series in series_read(run=run, names=names, points=RAW_STEPS):
        if not series.device.startswith("rank:") or not len(series.t):
            continue
        t, v = np.asarray(series.t), np.asarray(series.v)
        n = int(v.size)
        windows = max(1, min(BANDS, n // MIN_WINDOW))
        edges = np.linspace(0, n, windows + 1).round().astype(np.int64)
        mids, medians = [], []
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            if hi > lo:
                mids.append(float(t[(lo + hi - 1) // 2]))
                medians.append(float(np.median(v[lo:hi])))
        result.append(
            {
                "device": series.device,
                "phase": series.name[len(protocol.STEP_PHASE_PREFIX) :],
                "raw_count": series.raw_count,
                "t": mids,
                "median": medians,
            }
        )
    return result
