"""The real-GPU check in one command: planted-cause workloads under the offline agent, each
analysed by the recommender; NVML plausibility, trace classification, the agent's overhead,
the profiler window's cost and two knob A/Bs; one JSON and one Markdown report.

    python -m bench.gpu.kit [--device cuda|cpu] [--smoke] [--out DIR] [--budget-s 450]
                            [--only NAME,...] [--ab KNOB,...] [--skip overhead,ab]
                            [--work DIR]

`bash bench/gpu/run.sh` is the same with the repo on PYTHONPATH and `--out` defaulting to
$OUT or bench/results/gpu/<date>/. The kit itself needs only the standard library; it never
imports torch (children do) and keeps going when one workload fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.gpu import stages, wheels
from bench.gpu.expectations import AB_PAIRS, EXPECTATIONS
from bench.gpu.markdown import render_markdown
from bench.gpu.report import build_report

REPORT_JSON = "gpu-check.json"
REPORT_MD = "gpu-check.md"
WORK_ARCHIVE = "gpu-check-work.tar.gz"
ARCHIVE_MAX_BYTES = 12 << 20  # what comes back from the GPU machine: 16 MB per file
STAGES = ("diagnose", "overhead", "ab")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gpu.kit", description="The real-GPU check (bench/gpu/README.md)."
    )
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and few steps (CI)")
    parser.add_argument("--out", type=Path, help="report folder (default bench/results/gpu/<date>)")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a new temp folder)")
    parser.add_argument("--budget-s", type=float, default=450.0, help="total time (default 450)")
    parser.add_argument("--only", default="", help="comma-separated workloads to diagnose")
    parser.add_argument("--ab", default="", help="comma-separated knobs to A/B (default: all)")
    parser.add_argument(
        "--idle-seconds", type=float, help="idle_held's idle time (default 20; 310 proves the rule)"
    )
    parser.add_argument("--skip", default="", help=f"stages to skip, of {','.join(STAGES)}")
    parser.add_argument(
        "--wheels",
        type=Path,
        default=wheels.DEFAULT_DIR,
        help="folder of the recommender's wheels (bench/gpu/wheels)",
    )
    return parser


def default_out(now: datetime.datetime) -> Path:
    """bench/results/gpu/<UTC date>/."""
    return stages.REPO / "bench" / "results" / "gpu" / now.strftime("%Y-%m-%d")


def write(out: Path, raw: dict[str, Any]) -> dict[str, Any]:
    """Build the report from what has run so far and write both files (after every stage,
    so a kill still leaves a report)."""
    report = build_report(raw)
    out.mkdir(parents=True, exist_ok=True)
    (out / REPORT_JSON).write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    (out / REPORT_MD).write_text(render_markdown(report))
    return report


def archive_work(work: Path, out: Path) -> None:
    """Logs, analyses and offline folders (traces last), up to ARCHIVE_MAX_BYTES: the material
    for fixing a rule later without the GPU."""
    files = sorted(
        p for p in work.rglob("*") if p.is_file() and "site" not in p.relative_to(work).parts
    )
    files.sort(key=lambda p: (".pt.trace." in p.name, p.stat().st_size))
    total = 0
    with tarfile.open(out / WORK_ARCHIVE, "w:gz") as tar:
        for path in files:
            total += path.stat().st_size
            if total > ARCHIVE_MAX_BYTES:
                break
            tar.add(path, arcname=str(path.relative_to(work)))


def _names(text: str) -> list[str]:
    return [part for part in text.split(",") if part]


def _config(args: argparse.Namespace, work: Path) -> stages.Config:
    if args.smoke:
        cfg = stages.Config.smoke_on(args.device, work)
    else:
        cfg = stages.Config(device=args.device, work=work)
    if args.idle_seconds is not None:
        cfg.idle_seconds = args.idle_seconds
    return cfg


class Progress:
    """Writes the report so far after each stage and says so on stderr."""

    def __init__(self, out: Path, raw: dict[str, Any]) -> None:
        self.out, self.raw, self.started = out, raw, time.monotonic()

    def __call__(self, stage: str) -> dict[str, Any]:
        self.raw["kit"]["elapsed_s"] = round(time.monotonic() - self.started, 1)
        report = write(self.out, self.raw)
        elapsed = self.raw["kit"]["elapsed_s"]
        print(f"[gpu-check] {stage} done at {elapsed:.0f} s", file=sys.stderr, flush=True)
        return report


def run_kit(args: argparse.Namespace) -> dict[str, Any]:
    """Every stage within the budget; returns the written report."""
    now = datetime.datetime.now(datetime.UTC)
    out = args.out or default_out(now)
    work = args.work or Path(tempfile.mkdtemp(prefix="perfweb-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    budget, cfg = stages.Budget(args.budget_s), _config(args, work)
    cfg.recommender = wheels.prepare(folder=args.wheels, target=work / "site")
    raw: dict[str, Any] = {
        "kit": {
            "started_at": now.isoformat(timespec="seconds"),
            "device": args.device,
            "smoke": args.smoke,
            "budget_s": args.budget_s,
            "work": str(work),
            "argv": sys.argv[1:],
        },
        "recommender": cfg.recommender,
        "probe": stages.probe(cfg, budget),
        "workloads": {},
    }
    progress = Progress(out, raw)
    cfg.gpm_supported = raw["probe"].get("gpm_supported")
    stages.calibrate(cfg, raw["probe"])
    raw["kit"]["startup_estimate_s"] = cfg.startup_s
    skip, only, knobs = _names(args.skip), _names(args.only), _names(args.ab)
    pairs = [p for p in AB_PAIRS if not knobs or p.knob in knobs] if "ab" not in skip else []
    for expectation in EXPECTATIONS if "diagnose" not in skip else ():
        if not only or expectation.workload in only:
            raw["workloads"][expectation.workload] = stages.diagnose(cfg, budget, expectation)
            progress(expectation.workload)
    if "overhead" not in skip:
        raw["overhead"] = stages.overhead(cfg, budget, keep_s=stages.ab_cost(cfg) * len(pairs))
        progress("overhead")
    if "ab" not in skip:
        raw["ab"] = [stages.ab(cfg, budget, pair) for pair in pairs]
    report = progress("all stages")
    archive_work(work, out)
    print(f"[gpu-check] report: {out / REPORT_MD}", file=sys.stderr, flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the kit; 0 once the report is written, whatever it says."""
    run_kit(_parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
