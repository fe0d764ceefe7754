"""`perf-agent ab` on an inference workload, once: the before/after table the engine reports.

    .venv/bin/python bench/ab_inference.py            # quantize=dynamic, 5 rounds
    .venv/bin/python bench/ab_inference.py --knob inference_mode=true \
        --script examples/serving_autograd_on.py --out bench/results/ab_inference_mode.json

Runs the real engine (`python -m perfweb_agent.cli.main ab`, real torch, the real agent) on a
serving
example and keeps its JSON result, the per-round arm means (min–max of the rounds) and the
host's load average beside it, so the figures in agent/README.md can be traced to a run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARM_LINE = re.compile(r"round (\d+) (baseline|candidate)\s+([0-9.]+) s/")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--knob", default="quantize=dynamic")
    parser.add_argument("--script", default="examples/serving_linear_fp32.py")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="bench/results/ab_quantize_dynamic.json")
    args = parser.parse_args()
    argv = [
        sys.executable,
        "-m",
        "perfweb_agent.cli.main",
        "ab",
        "--knob",
        args.knob,
        "--rounds",
        str(args.rounds),
        "--max-rounds",
        str(args.rounds),
        "--format",
        "json",
        "--",
        sys.executable,
        args.script,
    ]
    load_before = os.getloadavg()
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        return done.returncode
    result = json.loads(done.stdout)
    means: dict[str, list[float]] = {"baseline": [], "candidate": []}
    for match in ARM_LINE.finditer(done.stderr):
        means[match.group(2)].append(float(match.group(3)))
    record = {
        "command": argv[3:],
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
        },
        "wall_s": round(wall, 1),
        "arm_mean_s_by_round": means,
        "arm_mean_s_median_min_max": {
            arm: [statistics.median(v), min(v), max(v)] for arm, v in means.items() if v
        },
        "result": result,
    }
    (REPO / args.out).write_text(json.dumps(record, indent=2) + "\n")
    sys.path.insert(0, str(REPO))
    from perfweb_agent.cli.ab import format_table

    print("\n".join(format_table(result["rows"])))
    print(
        f"speedup {result['speedup']:.2f}x (95% CI {result['ci_low']:.2f}-"
        f"{result['ci_high']:.2f}), verdict: {result['verdict']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
