"""This tree against an earlier commit: the agent-overhead and ingest benchmarks, interleaved.

    python bench/against_rev.py [--rev 1acdb37] [--rounds 3] [--runs 3]
                                [--work /tmp/perfweb-against] [--out FILE.json]

A redesign must not make the product slower. Both commits are exported (`git archive`, so
nothing of this checkout leaks in) into folders of their own, each installed by its own
`scripts/install.sh` into its own .venv, as a clean clone would be. Then each round runs
each commit's *own* benchmarks, the order alternating between rounds (old new, new old, ...)
so that drift on a shared host hits both alike:

- `bench/agent_overhead.py --blocks-only`: the in-process A/B, one process alternating blocks
  of steps with the agent's hooks on and off (ABBA), the 1 Hz agent's slowdown of the median
  training step in % — the figure a busy host moves least;
- `bench/agent_overhead.py --skip-micro --modes baseline,agent-1hz`: the 1 Hz agent's median
  step time against a bare run of the same loop, training and inference, as a ratio (the
  bench interleaves its own bare and attached runs);
- `bench/ingest.py --db sqlite`: HTTP ingest samples/s, and its ratio to a raw bulk load of
  the same rows in the same round (which takes the machine's speed out).

Reported per commit: the median over rounds with min-max; and new against old: for the
ingest figures the ratio of the medians (1.0 = the same), for the agent's ratios the change
of its cost (new less old: +0.01, or +1 for the in-process %, = the agent costs 1% more of a
step; 0 = the same).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from agent_overhead import _spread  # noqa: E402 - bench/ is on sys.path as a script

ROOT = Path(__file__).resolve().parents[1]

# what is read from each bench's JSON: name -> (bench, path of keys)
FIGURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "training_in_process_1hz_slowdown_pct": ("blocks", ("1hz", "slowdown_pct_median")),
    "training_agent_1hz_ratio": ("overhead", ("agent-1hz", "ratio_to_baseline", "median")),
    "inference_agent_1hz_ratio": (
        "overhead",
        ("inference", "agent-1hz", "ratio_to_baseline", "median"),
    ),
    "ingest_http_samples_per_s": ("ingest", ("http_samples_per_s_median",)),
    "ingest_http_vs_raw_load": ("ingest", ("ratio_http_vs_raw_load",)),
}


def export(rev: str, into: Path) -> Path:
    """`rev`'s files (git archive) in `into`, installed with its own scripts/install.sh."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    tree = into / commit
    if not (tree / ".venv" / "bin" / "python").exists():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        with tempfile.TemporaryFile() as archive:
            subprocess.run(["git", "-C", str(ROOT), "archive", commit], stdout=archive, check=True)
            archive.seek(0)
            with tarfile.open(fileobj=archive) as tar:
                tar.extractall(tree, filter="data")
        print(f"installing {commit} into {tree}/.venv", file=sys.stderr, flush=True)
        subprocess.run(["bash", "scripts/install.sh"], cwd=tree, check=True)
    return tree


def run_benches(tree: Path, runs: int, steps: int) -> dict[str, Any]:
    """One round of `tree`'s own benchmarks: their JSON, by bench."""
    python = str(tree / ".venv" / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERF_AGENT_", "PERFWEB_"))}
    env["PATH"] = f"{tree / '.venv' / 'bin'}:{env.get('PATH', '')}"
    out = tree / "against-overhead.json"
    blocks = subprocess.run(
        [python, "bench/agent_overhead.py", "--blocks-only"],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stderr
    (line,) = [line for line in blocks.splitlines() if line.startswith('{"blocks"')]
    subprocess.run(
        [python, "bench/agent_overhead.py", "--skip-micro", "--modes", "baseline,agent-1hz"]
        + ["--runs", str(runs), "--steps", str(steps), "--out", str(out)],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        [python, "bench/ingest.py", "--db", "sqlite", "--rounds", "2", "--batches", "20"],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    ingest = tree / "bench" / "results" / "ingest-sqlite.json"
    return {
        "blocks": json.loads(line)["blocks"],
        "overhead": json.loads(out.read_text()),
        "ingest": json.loads(ingest.read_text()),
    }


def figures(benches: dict[str, Any]) -> dict[str, float]:
    found: dict[str, float] = {}
    for name, (bench, keys) in FIGURES.items():
        value: Any = benches[bench]
        for key in keys:
            value = value[key]
        found[name] = float(value)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default="1acdb37", help="the earlier commit")
    parser.add_argument("--new", default="HEAD", help="the later commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3, help="agent_overhead's runs per round")
    parser.add_argument("--steps", type=int, default=300, help="agent_overhead's steps per run")
    parser.add_argument("--work", default="/tmp/perfweb-against", help="where the trees go")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "against_rev.json"))
    args = parser.parse_args()
    work = Path(args.work)
    trees = {"old": export(args.rev, work), "new": export(args.new, work)}
    rounds: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for number in range(args.rounds):
        order = ["old", "new"] if number % 2 == 0 else ["new", "old"]
        for side in order:
            rounds[side].append(figures(run_benches(trees[side], args.runs, args.steps)))
            print(f"round {number + 1}/{args.rounds} {side}: {rounds[side][-1]}", file=sys.stderr)
    summary: dict[str, Any] = {
        "old": {"commit": trees["old"].name},
        "new": {"commit": trees["new"].name},
        "new_over_old": {},
    }
    for name in FIGURES:
        for side in ("old", "new"):
            digits = 0 if name.endswith("per_s") else 4
            summary[side][name] = _spread([r[name] for r in rounds[side]], 1.0, digits)
        old, new = summary["old"][name]["median"], summary["new"][name]["median"]
        if name.endswith("_ratio"):  # the agent's cost: new less old, in ratio points
            summary["new_over_old"][name.replace("_ratio", "_cost_change")] = round(new - old, 4)
        elif name.endswith("_pct"):  # the same, in percentage points
            summary["new_over_old"][name + "_change"] = round(new - old, 3)
        else:
            summary["new_over_old"][name] = round(new / old, 3)
    summary["config"] = {
        "rounds": args.rounds,
        "runs": args.runs,
        "steps": args.steps,
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),
    }
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
