"""What a run's profiler traces could not show, in the report's words: the agent's notes on
windows it skipped or cut (facts), and what each analysed trace lacks (CPU operators, step
markers, GPU kernels). `coverage` lists them among what was not seen."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfweb_recommender.analysis.summary import TraceSummary

# What the agent says (facts) of a profiler window it did not record as asked, because
# torch's profiler could not be started or stopped safely where the window was due.
PROFILER_NOTES = (
    ("profiler.skipped", "profiler window skipped"),
    ("profiler.one_piece", "profiler windows recorded in fewer pieces"),
    ("profiler.window_cut", "profiler window cut short"),
)


def profiler_notes(facts: Mapping[str, Any]) -> list[str]:
    """What the agent said of profiler windows it skipped, cut or did not segment (facts
    `profiler.skipped`, `profiler.one_piece`, `profiler.window_cut`), as report lines."""
    return [
        f"{what}: {facts[key]}"
        for key, what in PROFILER_NOTES
        if isinstance(facts.get(key), str) and facts[key]
    ]


def trace_gaps(traces: Sequence[TraceSummary]) -> list[str]:
    """What each analysed trace lacks: CPU operators, step markers, GPU kernels."""
    gaps: list[str] = []
    for trace in traces:
        where = f"trace rank {trace.rank}"
        if trace.cpu_events == 0:
            gaps.append(
                f"{where} has GPU events only (no CPU operators): DataLoader waits, steps, "
                "tiny-operator overhead and the model's operators (attention, DataParallel) "
                "cannot be judged"
            )
        elif not trace.steps:
            gaps.append(
                f"{where} has no ProfilerStep markers: GPU shares are of the first-to-last "
                "kernel span, not of a step"
            )
        if not trace.launch.get("kernels") and trace.cpu_events:
            gaps.append(f"{where} has no GPU kernels (a CPU-only trace)")
    return gaps
