"""What `perf-agent attach` costs a whole script: a ~7 s training script bare and attached.

    python bench/whole_process.py [--rounds 5] [--steps 1000] [--set PERF_AGENT_X=V ...]
                                  [--out FILE.json]

The script is bench/agent_overhead.py's training loop (MLP, DataLoader over tensors, AdamW),
run as a user runs it: `python loop.py` against `perf-agent attach --offline DIR -- python
loop.py` with the agent's defaults (sampling, step anatomy, the FLOPs count and the CPU
peak probe at exit, one profiler window); `--set` changes a setting of the attached arm
(e.g. PERF_AGENT_PROFILE=0), to see what each part costs. Each round runs both, the order
alternating between rounds (A B, B A, ...) so that drift on a shared host hits both alike.
The agent's cache (PERF_AGENT_CACHE_DIR: the CPU's probed peak, agent/README.md) is a
folder of the bench's own, filled by one attached run before the rounds, untimed: the rounds
measure what every run after a host's first pays (the first pays the probe, ~0.1-0.4 s, once a
week). Per round: the wall time of each whole process, start-up and exit included, and its CPU
time (user + system of it and its children, which a busy neighbour does not inflate); the
ratio attached / bare of each. Reported: the medians with their min-max, and the bare script's
own times. Goal (issue 31): the whole-process wall ratio <= 1.01.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_overhead import LOOP, _spread  # noqa: E402 - bench/ is on sys.path as a script

ROOT = Path(__file__).resolve().parents[1]
GOAL = 1.01


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one whole process and its children; it must exit 0."""
    cpu, start = _children_cpu_s(), time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return wall, _children_cpu_s() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE, attached arm")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "whole_process.json"))
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    settings = dict(item.split("=", 1) for item in args.set)
    with tempfile.TemporaryDirectory() as tmp:
        attached_env = {**env, "PERF_AGENT_CACHE_DIR": str(Path(tmp) / "cache"), **settings}
        script = Path(tmp) / "loop.py"
        script.write_text(LOOP)
        bare = [sys.executable, str(script), str(args.steps)]
        arms = {
            "bare": lambda _: bare,
            "attached": lambda n: [
                *(sys.executable, "-m", "perfweb_agent.cli.main", "attach"),
                *("--offline", str(Path(tmp) / f"run{n}"), "--", *bare),
            ],
        }
        timed(arms["attached"]("-warm"), attached_env)  # the host's first run: fills the cache
        rounds: list[dict[str, Any]] = []
        for n in range(args.rounds):
            order = ["bare", "attached"] if n % 2 == 0 else ["attached", "bare"]
            measured = {
                arm: timed(arms[arm](n), attached_env if arm == "attached" else env)
                for arm in order
            }
            rounds.append(
                {
                    "order": order,
                    **{f"{arm}_wall_s": round(w, 4) for arm, (w, _) in measured.items()},
                    **{f"{arm}_cpu_s": round(c, 4) for arm, (_, c) in measured.items()},
                    "wall_ratio": measured["attached"][0] / measured["bare"][0],
                    "cpu_ratio": measured["attached"][1] / measured["bare"][1],
                }
            )
            print(
                f"round {n + 1}: bare {measured['bare'][0]:.2f} s, attached "
                f"{measured['attached'][0]:.2f} s (wall x{rounds[-1]['wall_ratio']:.4f}, "
                f"CPU x{rounds[-1]['cpu_ratio']:.4f})",
                flush=True,
            )
    result = {
        "steps": args.steps,
        "attached_settings": settings,
        "rounds": rounds,
        "bare_wall_s": _spread([r["bare_wall_s"] for r in rounds]),
        "bare_cpu_s": _spread([r["bare_cpu_s"] for r in rounds]),
        "wall_ratio": _spread([r["wall_ratio"] for r in rounds], digits=4),
        "cpu_ratio": _spread([r["cpu_ratio"] for r in rounds], digits=4),
        "goal_wall_ratio_max": GOAL,
        "load_average": os.getloadavg(),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    wall, cpu = result["wall_ratio"], result["cpu_ratio"]
    print(
        f"whole process, attached / bare over {args.rounds} rounds: wall x{wall['median']:.4f} "
        f"({wall['min']:.4f}-{wall['max']:.4f}), CPU x{cpu['median']:.4f} "
        f"({cpu['min']:.4f}-{cpu['max']:.4f}); goal wall <= {GOAL}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
