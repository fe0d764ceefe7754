"""How much of a trace the analyses may keep in memory, and what a trace over it loses.

The streaming reader's own memory is a constant (a chunk of the file and its decoded
events); what grows with the trace is the columns kept for the analyses, and the analyses'
temporary arrays, which measure at about 2.3 times the columns (a 4 GB trace: 250 MB of
columns, 810 MB peak for the whole process). A budget in MB therefore allows
(budget - BASE_MB) / ANALYSIS_FACTOR of columns. A trace whose columns would pass that is
read in a degraded mode: only its earliest stretch of time is kept (events later than a
cut-off are dropped as they pass, and the cut-off moves earlier while the columns still do
not fit), and the trace says what was skipped (`Degraded.sentence`).

The budget comes from the caller (the server passes its diagnosis worker's setting) or the
environment variable PERFWEB_TRACE_MEMORY_MB; none means no limit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV_VAR = "PERFWEB_TRACE_MEMORY_MB"
BASE_MB = 100.0  # interpreter, numpy and msgspec, a chunk of the file and its events
ANALYSIS_FACTOR = 3.3  # peak memory of the analyses per byte of columns, columns included
MIN_COLUMNS_MB = 8.0  # below this a budget is not honoured: no trace is analysed on less


def memory_budget_mb(explicit: float | None = None) -> float | None:
    """The budget in MB: the caller's, else $PERFWEB_TRACE_MEMORY_MB, else None (no limit)."""
    if explicit is not None:
        return float(explicit) if explicit > 0 else None
    raw = os.environ.get(ENV_VAR, "").strip()
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        return None
    return value if value > 0 else None


PEAK_PER_JSON_BYTE = 0.2  # measured: 4.0 GB of Kineto JSON, 810 MB peak (base included)


def analysis_peak_mb(json_bytes: int) -> float:
    """Estimated peak memory (MB) of analysing a trace of this many JSON bytes."""
    return BASE_MB + json_bytes * PEAK_PER_JSON_BYTE / 2**20


def column_limit_bytes(budget_mb: float | None) -> int | None:
    """The bytes of columns a budget allows (None: no limit)."""
    if budget_mb is None:
        return None
    columns_mb = max(MIN_COLUMNS_MB, (budget_mb - BASE_MB) / ANALYSIS_FACTOR)
    return int(columns_mb * 2**20)


@dataclass
class Degraded:
    """What a trace over the memory budget lost: everything after `kept_until_us`."""

    budget_mb: float
    kept_until_us: float  # relative to the trace's first event, like every analysed time
    span_us: float  # the whole trace's span, first event to the last one's end
    skipped_events: int  # events the analyses would have read, dropped
    kept_events: int
    steps_kept: int
    steps_total: int

    def sentence(self) -> str:
        """One sentence for the report."""
        steps = f", steps: {self.steps_kept} of {self.steps_total}" if self.steps_total else ""
        return (
            f"trace over the memory budget ({self.budget_mb:.0f} MB): analysed its first "
            f"{self.kept_until_us / 1e6:.3f} s of {self.span_us / 1e6:.3f} s{steps}; "
            f"skipped {self.skipped_events:,} of {self.skipped_events + self.kept_events:,} "
            "events after that"
        )
