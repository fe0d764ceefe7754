"""How often the A/B decision rule calls a knob that does nothing faster or slower.

    .venv/bin/python bench/ab_noise.py                       # measure 32 rounds, then replay
    .venv/bin/python bench/ab_noise.py --replay bench/results/ab_noise.json   # replay only

1. Measures a pool of A/A rounds with the real engine: `cudnn_benchmark=true` on the CPU
   (the applier sets a flag nothing reads) on tests/jobs/input_bound.py --healthy, the
   workload of the end-to-end test whose no-op knob once measured "faster" in CI.
2. Replays many jobs over that pool: each job draws its rounds from the pool without
   replacement (odd rounds from the pool's baseline-first rounds, even ones from its
   candidate-first rounds, as the engine runs them), looks after `--min-rounds`, and adds a
   round while its verdict is inconclusive, up to `--max-rounds`. Every job is decided
   twice: by the rule before this change (a two-level bootstrap 95% interval, looked at
   after every round as if it were the only look) and by `perfweb_contract.ab.decision.compare`
   (the trimmed-mean round statistic and its always-valid interval, looked at after every round).

Any decided "faster" of a no-op knob is a false verification; the report counts them per
rule. The pool's own spread is reported too: the standard deviation of the rounds' log
speedups, and how much of it the steps' own noise explains (the rest is drift between rounds).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from perfweb_agent.ab.engine import AbPlan, Arm, run_ab
from perfweb_contract.ab.decision import compare, verdict_of
from perfweb_contract.ab.results import Round

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = ["python", "tests/jobs/input_bound.py", "--healthy", "--steps", "30"]


def measure(rounds: int, steps: int) -> list[dict]:
    """`rounds` real A/A rounds of the no-op knob: each arm's kept step times."""
    arms: dict[tuple[int, str], list[float]] = {}

    def keep(arm: Arm) -> None:
        arms[(arm.round, arm.arm)] = list(arm.step_s)
        print(
            f"round {arm.round:2d} {arm.arm:9s} {statistics.fmean(arm.step_s):.5f} s/step",
            file=sys.stderr,
            flush=True,
        )

    plan = AbPlan(
        command=[sys.executable, *WORKLOAD[1:]],
        knobs={"cudnn_benchmark": True},
        rounds=rounds,
        max_rounds=rounds,
        steps=steps,
        cwd=str(REPO),
    )
    run_ab(plan, on_arm=keep)
    return [
        {"round": n, "baseline": arms[(n, "baseline")], "candidate": arms[(n, "candidate")]}
        for n in range(1, rounds + 1)
    ]


def bootstrap_before(rounds: Sequence[Round], *, resamples: int = 2000, seed: int = 0) -> tuple:
    """The interval of the rule before this change: resample rounds, then steps in each arm,
    2.5th and 97.5th percentiles of the speedup (no look correction)."""
    rng = random.Random(seed)
    estimates = []
    for _ in range(resamples):
        base = cand = 0.0
        count_b = count_c = 0
        for _round in rounds:
            chosen = rounds[rng.randrange(len(rounds))]
            base += math.fsum(rng.choices(chosen.baseline, k=len(chosen.baseline)))
            cand += math.fsum(rng.choices(chosen.candidate, k=len(chosen.candidate)))
            count_b += len(chosen.baseline)
            count_c += len(chosen.candidate)
        estimates.append((base / count_b) / (cand / count_c))
    estimates.sort()
    return estimates[int(0.025 * (resamples - 1))], estimates[int(0.975 * (resamples - 1))]


def verdict_before(rounds: Sequence[Round]) -> str:
    baseline = [x for r in rounds for x in r.baseline]
    candidate = [x for r in rounds for x in r.candidate]
    return verdict_of(speedup_of(baseline, candidate), *bootstrap_before(rounds))


def verdict_after(rounds: Sequence[Round]) -> str:
    return compare(rounds).verdict


def speedup_of(baseline: Sequence[float], candidate: Sequence[float]) -> float:
    """Mean baseline step time over mean candidate step time (the rule before)."""
    return statistics.fmean(baseline) / statistics.fmean(candidate)


def replay(pool: list[dict], *, jobs: int, min_rounds: int, max_rounds: int, seed: int) -> dict:
    """Verdicts of `jobs` simulated engine jobs over the pool, by each rule."""
    first = [Round(p["baseline"], p["candidate"]) for p in pool if p["round"] % 2 == 1]
    second = [Round(p["baseline"], p["candidate"]) for p in pool if p["round"] % 2 == 0]
    if min(len(first), len(second)) * 2 < max_rounds:
        raise SystemExit(f"the pool has too few rounds for jobs of up to {max_rounds}")
    rng = random.Random(seed)
    tally: dict[str, Counter] = {"before": Counter(), "after": Counter()}
    used: dict[str, list[int]] = {"before": [], "after": []}
    for _ in range(jobs):
        odd, even = rng.sample(first, len(first)), rng.sample(second, len(second))
        sequence = [(odd if k % 2 == 0 else even)[k // 2] for k in range(max_rounds)]
        for rule in ("before", "after"):
            for n in range(min_rounds, max_rounds + 1):
                taken = sequence[:n]
                verdict = verdict_before(taken) if rule == "before" else verdict_after(taken)
                if verdict != "inconclusive":
                    break
            tally[rule][verdict] += 1
            used[rule].append(n)
    return {
        rule: {
            "verdicts": dict(tally[rule]),
            "false_faster_share": tally[rule]["faster"] / jobs,
            "false_decided_share": (tally[rule]["faster"] + tally[rule]["slower"]) / jobs,
            "rounds_median": statistics.median(used[rule]),
        }
        for rule in tally
    } | {"jobs": jobs, "min_rounds": min_rounds, "max_rounds": max_rounds}


def spread(pool: list[dict]) -> dict:
    """The pool's noise: the rounds' log speedups, and the part the steps alone explain."""
    logs = [
        math.log(statistics.fmean(p["baseline"]) / statistics.fmean(p["candidate"])) for p in pool
    ]

    def within(steps: list[float]) -> float:
        mean = statistics.fmean(steps)
        return statistics.variance(steps) / len(steps) / mean**2

    steps_part = statistics.fmean(within(p["baseline"]) + within(p["candidate"]) for p in pool)
    return {
        "rounds": len(pool),
        "log_speedup_sd": statistics.stdev(logs),
        "log_speedup_min_max": [min(logs), max(logs)],
        "steps_alone_sd": math.sqrt(steps_part),
        "pool_speedup": speedup_of(
            [x for p in pool for x in p["baseline"]], [x for p in pool for x in p["candidate"]]
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=32, help="A/A rounds to measure (32)")
    parser.add_argument("--steps", type=int, default=40, help="kept steps per arm (40)")
    parser.add_argument("--replay", metavar="JSON", help="replay a pool measured before")
    parser.add_argument("--jobs", type=int, default=400, help="simulated jobs per shape (400)")
    parser.add_argument("--out", default="bench/results/ab_noise.json")
    args = parser.parse_args()
    os.chdir(REPO)
    if args.replay:
        record = json.loads(Path(args.replay).read_text())
    else:
        load_before, started = os.getloadavg(), time.monotonic()
        pool = measure(args.rounds, args.steps)
        record = {
            "workload": WORKLOAD,
            "knob": "cudnn_benchmark=true",
            "steps_per_arm": args.steps,
            "host": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_before": load_before,
                "load_after": os.getloadavg(),
            },
            "measure_wall_s": round(time.monotonic() - started, 1),
            "pool": pool,
        }
    record["spread"] = spread(record["pool"])
    # The end-to-end test's job (4 rounds, up to 8) and the jobs form's default (5, up to 20).
    record["replays"] = [
        replay(record["pool"], jobs=args.jobs, min_rounds=lo, max_rounds=hi, seed=lo)
        for lo, hi in ((4, 8), (5, 20))
        if len(record["pool"]) >= hi + 2
    ]
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({"spread": record["spread"], "replays": record["replays"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
