"""Benchmark: HTA 0.5.0 vs the recommender on the same traces, in one run.

    python bench/trace_analysis.py [--runs 5] [--hta-python /tmp/hta-venv/bin/python]
                                   [--traces hta/trace_filter hta/df_index_resolver ...]

Each measurement is a fresh subprocess doing load + all analyses:
- HTA: `TraceAnalysis(trace_dir)` then the temporal, idle-time (with interval stats),
  kernel (with memory kernels) and comm-comp overlap breakdowns, exactly as
  ../shared/peer-traces/run_hta.py does (HTA runs only in its own virtual environment:
  `python -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis
  "pandas<3"`);
- ours: load every rank, run every analysis (`summarize`) and every rule (`diagnose`).
Wall time is the time of that work inside the process (imports excluded for both); peak RSS
is the process's maximum resident set (children included: HTA parses ranks in a pool).
Medians over `--runs` runs, interleaved (HTA, ours, HTA, ours, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
DEFAULT_TRACES = ("hta/trace_filter", "hta/df_index_resolver")
DEFAULT_HTA_PYTHON = "/tmp/hta-venv/bin/python"


def _peer_traces() -> Path:
    for candidate in (
        os.environ.get("PERFWEB_PEER_TRACES", ""),
        str(REPO.parent / "shared" / "peer-traces"),
        str(REPO / "shared" / "peer-traces"),
    ):
        if candidate and (Path(candidate) / "run_hta.py").is_file():
            return Path(candidate)
    raise SystemExit("error: shared/peer-traces (with run_hta.py) not found")


def _measure(command: list[str], cwd: Path) -> dict[str, float]:
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"error: {' '.join(command[:3])} failed: {result.stderr[-800:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _hta(python: str, peer: Path, trace_dir: str) -> dict[str, float]:
    probe = BENCH / "_probe_hta.py"
    return _measure([python, str(probe), str(peer / "run_hta.py"), trace_dir], cwd=peer)


def _ours(peer: Path, trace_dir: str) -> dict[str, float]:
    probe = BENCH / "_probe_ours.py"
    return _measure([sys.executable, str(probe), str(peer / trace_dir)], cwd=REPO)


def _row(name: str, hta: list[dict[str, float]], ours: list[dict[str, float]]) -> dict[str, float]:
    def med(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    row = {
        "trace": name,
        "hta_s": med(hta, "wall_s"),
        "ours_s": med(ours, "wall_s"),
        "hta_peak_mib": med(hta, "peak_rss_mib"),
        "ours_peak_mib": med(ours, "peak_rss_mib"),
        "hta_added_mib": med(hta, "added_rss_mib"),
        "ours_added_mib": med(ours, "added_rss_mib"),
    }
    row["speedup"] = row["hta_s"] / row["ours_s"]
    row["memory_ratio"] = row["ours_peak_mib"] / row["hta_peak_mib"]
    return row


def _print(rows: list[dict[str, float]], runs: int) -> None:
    print(f"medians over {runs} runs (load + all analyses; peak RSS includes the interpreter)")
    header = (
        f"{'trace':32} {'HTA s':>8} {'ours s':>8} {'speedup':>8} "
        f"{'HTA MiB':>8} {'ours MiB':>9} {'ratio':>6} {'HTA +MiB':>9} {'ours +MiB':>10}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['trace']:32} {r['hta_s']:8.3f} {r['ours_s']:8.3f} {r['speedup']:7.1f}x "
            f"{r['hta_peak_mib']:8.0f} {r['ours_peak_mib']:9.0f} {r['memory_ratio']:6.2f} "
            f"{r['hta_added_mib']:9.0f} {r['ours_added_mib']:10.0f}"
        )


def main() -> None:
    """Run the benchmark and print the table (and --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hta-python", default=DEFAULT_HTA_PYTHON)
    parser.add_argument("--traces", nargs="+", default=list(DEFAULT_TRACES))
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    if not Path(args.hta_python).is_file():
        raise SystemExit(f"error: no HTA interpreter at {args.hta_python} (see the docstring)")
    peer = _peer_traces()
    rows = []
    for trace_dir in args.traces:
        hta, ours = [], []
        for _ in range(args.runs):
            hta.append(_hta(args.hta_python, peer, trace_dir))
            ours.append(_ours(peer, trace_dir))
        rows.append(_row(trace_dir, hta, ours))
        print(f"done {trace_dir}", file=sys.stderr)
    _print(rows, args.runs)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": args.runs, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
