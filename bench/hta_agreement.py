"""The agreement table: our numbers next to HTA 0.5.0's recorded ones, per trace and rank.

    python bench/hta_agreement.py [--markdown]

Reads ../shared/peer-traces/hta-0.5.0-results/*.json (HTA's outputs) and analyses the same
traces; on nanosecond traces it also shows our numbers after HTA's microsecond rounding.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfweb_recommender.analysis import gpu_time  # noqa: E402
from perfweb_recommender.analysis.hta_compat import hta_rounded  # noqa: E402
from perfweb_recommender.trace.loader import load_traces  # noqa: E402

_REPO = Path(__file__).resolve().parents[1]
PEER = next(
    (
        p
        for p in (_REPO.parent / "shared" / "peer-traces", _REPO / "shared" / "peer-traces")
        if p.is_dir()
    ),
    _REPO.parent / "shared" / "peer-traces",
)


def _runs() -> list[dict]:
    runs: list[dict] = []
    for name in ("trace_filter.json", "other_traces.json"):
        runs += json.loads((PEER / "hta-0.5.0-results" / name).read_text())["runs"]
    return runs


def _ours(trace) -> tuple[float, float, float, float | None]:  # noqa: ANN001
    window = gpu_time.analysis_window(trace)
    t = gpu_time.temporal_breakdown(window)
    overlap = gpu_time.comm_comp_overlap_pct(window)
    return t.pct(t.idle_us), t.pct(t.compute_us), t.pct(t.non_compute_us), overlap


def _fmt(values: tuple[float, float, float, float | None]) -> str:
    overlap = "-" if values[3] is None else f"{values[3]:.2f}"
    return f"{values[0]:6.2f} {values[1]:6.2f} {values[2]:6.2f} {overlap:>6}"


def main() -> None:
    """Print the table (idle / compute / non-compute / comm-comp overlap, in %)."""
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    print(f"{'trace':40} {'rank':>4}  {'ours: idle compute non-comp overlap':36}  HTA 0.5.0")
    worst = 0.0
    for run in _runs():
        temporal = {r["rank"]: r for r in run["results"]["temporal"][0]}
        overlap = {r["rank"]: r["comp_comm_overlap_pctg"] for r in run["results"]["overlap"][0]}
        for trace in load_traces(PEER / run["trace_dir"]):
            row = temporal[trace.rank]
            hta = (
                row["idle_time_pctg"],
                row["compute_time_pctg"],
                row["non_compute_time_pctg"],
                overlap[trace.rank],
            )
            ours = _ours(trace)
            diffs = [
                abs(a - b)
                for a, b in zip(ours, hta, strict=True)
                if a is not None and b is not None
            ]
            worst = max(worst, *diffs)
            print(f"{run['trace_dir']:40} {trace.rank:>4}  {_fmt(ours):36}  {_fmt(hta)}")
            if trace.fractional_timestamps:
                rounded = _ours(hta_rounded(trace))
                print(f"{'  (ours after HTA µs rounding)':40} {'':>4}  {_fmt(rounded):36}")
    print(f"largest difference: {worst:.2f} percentage points")


if __name__ == "__main__":
    main()
