"""Benchmark: HTA 0.5.0 vs the recommender on the same traces, in one run.

    python bench/trace_analysis.py [--runs 5] [--hta-python /tmp/hta-venv/bin/python]
                                   [--traces hta/trace_filter hta/df_index_resolver ...]
                                   [--large 0.5 2 4 [--large-hta 0.5]]

Each measurement is a fresh subprocess doing load + all analyses:
- HTA: `TraceAnalysis(trace_dir)` then the temporal, idle-time (with interval stats),
  kernel (with memory kernels) and comm-comp overlap breakdowns, exactly as
  ../shared/peer-traces/run_hta.py does (HTA runs only in its own virtual environment:
  `python -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis
  "pandas<3"`);
- ours: load every rank, run every analysis (`summarize`) and every rule (`diagnose`).
Wall time is the time of that work inside the process (imports excluded for both); peak RSS
is the process's maximum resident set (children included: HTA parses ranks in a pool).
Medians over `--runs` runs, interleaved (HTA, ours, HTA, ours, ...). `process s` is the
whole process, interpreter start and imports included, timed from outside.

`--large GB ...`: the large case, a trace of that many GB (uncompressed JSON) made under
/tmp by `large_trace.py` from df_index_resolver (deleted afterwards), analysed by
`python -m perfweb_recommender analyze` with its peak RSS and the machine's load average
(a shared machine reads and computes slower under load: user + system CPU seconds are shown
beside the wall time). HTA runs on the sizes given to `--large-hta` only (it took 896 s and
9.6 GB for 1.88 GB here), when its estimated peak fits in half the available memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from large_trace import write_large_trace

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
DEFAULT_TRACES = ("hta/trace_filter", "hta/df_index_resolver")
DEFAULT_HTA_PYTHON = "/tmp/hta-venv/bin/python"
LARGE_SOURCE = "hta/df_index_resolver/df_index_resolver.json.gz"
HTA_PEAK_PER_GB = 5.1  # GB of HTA 0.5.0 peak RSS per GB of JSON (9.6 GB for 1.88 GB)


def _peer_traces() -> Path:
    for candidate in (
        os.environ.get("PERFWEB_PEER_TRACES", ""),
        str(REPO.parent / "shared" / "peer-traces"),
        str(REPO / "shared" / "peer-traces"),
    ):
        if candidate and (Path(candidate) / "run_hta.py").is_file():
            return Path(candidate)
    raise SystemExit("error: shared/peer-traces (with run_hta.py) not found")


def _measure(command: list[str], cwd: Path, timeout: float = 600) -> dict[str, float]:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=timeout)
    process_s = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"error: {' '.join(command[:3])} failed: {result.stderr[-800:]}")
    return {**json.loads(result.stdout.strip().splitlines()[-1]), "process_s": process_s}


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
        "hta_process_s": med(hta, "process_s"),
        "ours_process_s": med(ours, "process_s"),
    }
    row["speedup"] = row["hta_s"] / row["ours_s"]
    row["process_speedup"] = row["hta_process_s"] / row["ours_process_s"]
    row["memory_ratio"] = row["ours_peak_mib"] / row["hta_peak_mib"]
    return row


def _print(rows: list[dict[str, float]], runs: int) -> None:
    print(f"medians over {runs} runs (load + all analyses; peak RSS includes the interpreter)")
    header = (
        f"{'trace':32} {'HTA s':>8} {'ours s':>8} {'speedup':>8} "
        f"{'HTA MiB':>8} {'ours MiB':>9} {'ratio':>6} {'HTA +MiB':>9} {'ours +MiB':>10} "
        f"{'process s HTA/ours':>19} {'speedup':>8}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['trace']:32} {r['hta_s']:8.3f} {r['ours_s']:8.3f} {r['speedup']:7.1f}x "
            f"{r['hta_peak_mib']:8.0f} {r['ours_peak_mib']:9.0f} {r['memory_ratio']:6.2f} "
            f"{r['hta_added_mib']:9.0f} {r['ours_added_mib']:10.0f} "
            f"{r['hta_process_s']:9.3f}/{r['ours_process_s']:<9.3f} "
            f"{r['process_speedup']:7.1f}x"
        )


def _available_gb() -> float:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return 0.0


_TABLES = (
    "import sys; from perfweb_recommender.analysis.trace_tables import trace_tables; "
    "trace_tables(sys.argv[1])"
)


def _timed(command: list[str], what: str) -> tuple[float, float, float]:
    """(wall s, user + system CPU s, peak RSS MiB) of a command under /usr/bin/time."""
    result = subprocess.run(
        ["/usr/bin/time", "-f", "%e %U %S %M", *command],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=1800,
    )
    if result.returncode != 0:
        raise SystemExit(f"error: {what} failed: {result.stderr[-800:]}")
    wall, user, system, peak_kib = result.stderr.strip().splitlines()[-1].split()
    return float(wall), float(user) + float(system), int(peak_kib) / 1024


def _ours_large(path: Path) -> dict[str, float]:
    """Whole processes under /usr/bin/time (wall, user + system CPU, peak RSS), with the
    load average before and after: `python -m perfweb_recommender analyze`, then the
    operator and kernel tables the server also builds (`trace_tables`, its own process)."""
    load_before = os.getloadavg()[0]
    wall, cpu, peak = _timed(
        [sys.executable, "-m", "perfweb_recommender", "analyze", str(path)], f"analyze {path}"
    )
    tables_wall, tables_cpu, tables_peak = _timed(
        [sys.executable, "-c", _TABLES, str(path)], f"trace_tables {path}"
    )
    return {
        "process_s": wall,
        "cpu_s": cpu,
        "peak_rss_mib": peak,
        "tables_process_s": tables_wall,
        "tables_cpu_s": tables_cpu,
        "tables_peak_rss_mib": tables_peak,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def _large(args: argparse.Namespace, peer: Path) -> list[dict[str, float]]:
    rows = []
    for gb in sorted(args.large):
        folder = Path(tempfile.mkdtemp(prefix="perfweb-large-", dir="/tmp"))
        try:
            path = folder / "rank-0.json"
            copies = write_large_trace(peer / LARGE_SOURCE, path, gigabytes=gb)
            row: dict[str, float] = {"gb": path.stat().st_size / 1e9, "copies": copies}
            runs = [_ours_large(path) for _ in range(args.large_runs)]
            for key in runs[0]:
                row[f"ours_{key}"] = statistics.median(r[key] for r in runs)
            row["ours_process_s_min"] = min(r["process_s"] for r in runs)
            row["ours_process_s_max"] = max(r["process_s"] for r in runs)
            if gb in args.large_hta and gb * HTA_PEAK_PER_GB < _available_gb() / 2:
                hta = _measure(
                    [
                        args.hta_python,
                        str(BENCH / "_probe_hta.py"),
                        str(peer / "run_hta.py"),
                        str(folder),
                    ],
                    cwd=peer,
                    timeout=7200,
                )
                row.update({f"hta_{k}": v for k, v in hta.items()})
            rows.append(row)
            print(f"done large {gb} GB", file=sys.stderr)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def _print_large(rows: list[dict[str, float]]) -> None:
    print("large case: python -m perfweb_recommender analyze (whole process); tables: the")
    print("operator and kernel tables the server adds (trace_tables, whole process)")
    print(
        f"{'GB':>5} {'wall s':>8} {'min-max':>15} {'CPU s':>7} {'peak MiB':>9} "
        f"{'load':>11} {'HTA s':>8} {'HTA MiB':>8} {'tables s':>9} {'CPU s':>6} {'MiB':>5}"
    )
    for r in rows:
        hta = (
            f"{r['hta_process_s']:8.1f} {r['hta_peak_rss_mib']:8.0f}"
            if "hta_process_s" in r
            else f"{'-':>8} {'-':>8}"
        )
        print(
            f"{r['gb']:5.2f} {r['ours_process_s']:8.1f} "
            f"{r['ours_process_s_min']:7.1f}-{r['ours_process_s_max']:<7.1f} "
            f"{r['ours_cpu_s']:7.1f} {r['ours_peak_rss_mib']:9.0f} "
            f"{r['ours_load_before']:5.1f}/{r['ours_load_after']:<5.1f} {hta} "
            f"{r['ours_tables_process_s']:9.1f} {r['ours_tables_cpu_s']:6.1f} "
            f"{r['ours_tables_peak_rss_mib']:5.0f}"
        )


def main() -> None:
    """Run the benchmark and print the table (and --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hta-python", default=DEFAULT_HTA_PYTHON)
    parser.add_argument("--traces", nargs="+", default=list(DEFAULT_TRACES))
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--large", type=float, nargs="*", default=[], help="GB, e.g. 0.5 2 4")
    parser.add_argument("--large-runs", type=int, default=1)
    parser.add_argument("--large-hta", type=float, nargs="*", default=[], help="GB with HTA")
    args = parser.parse_args()
    peer = _peer_traces()
    large = _large(args, peer) if args.large else []
    if large:
        _print_large(large)
    if args.large and not args.large_hta:
        args.traces = []  # the large case alone
    elif not Path(args.hta_python).is_file():
        raise SystemExit(f"error: no HTA interpreter at {args.hta_python} (see the docstring)")
    rows = []
    for trace_dir in args.traces:
        hta, ours = [], []
        for _ in range(args.runs):
            hta.append(_hta(args.hta_python, peer, trace_dir))
            ours.append(_ours(peer, trace_dir))
        rows.append(_row(trace_dir, hta, ours))
        print(f"done {trace_dir}", file=sys.stderr)
    if rows:
        _print(rows, args.runs)
    if args.json:
        document = {"runs": args.runs, "rows": rows, "large": large}
        Path(args.json).write_text(json.dumps(document, indent=1))


if __name__ == "__main__":
    main()
