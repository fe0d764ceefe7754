"""Replay: the best estimate of an operator-level fix is the run's own recorded shapes run
both ways, on the same host, in a helper process with the run's intra-op thread count.

The rules stay pure: this is a step before them. `replay_evidence` takes the replay plan of
the first trace that has one (`TraceSummary.replay_plan`, perfweb_recommender.replay.plan,
from a trace the agent recorded with `record_shapes`), runs
`python -m perfweb_recommender.replay.worker` on it (seconds of CPU, never inside the
user's process), and puts the results in `RunEvidence.replays`; the rules
(model.quantization, inference.channels_last, attention.fused, inference.autograd_enabled)
then say `replayed: ...` with the figure and its spread. Where torch is not importable here,
the run used a GPU (the replay times the CPU only), or no trace has shapes, there is no
replay and `RunEvidence.replay_note` says why; the rules fall back to measured or prior.

PERFWEB_REPLAY=0 turns it off.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import statistics
import subprocess
import sys
from typing import Any

import orjson

from perfweb_recommender.evidence import Replayed, RunEvidence

REPEATS = 7  # interleaved A/B pairs per case
BUDGET_S = 1.5  # per case: past it, the pairs stop (two at least)
TIMEOUT_S = 120.0  # the whole helper process
_CACHE: dict[str, tuple[dict[str, Replayed], str]] = {}  # plan digest -> result, this process


def replay_possible() -> str:
    """'' when this process can replay, else why not."""
    if os.environ.get("PERFWEB_REPLAY", "1") == "0":
        return "replay turned off (PERFWEB_REPLAY=0)"
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed where the analysis runs"
    return ""


def replay_evidence(
    evidence: RunEvidence, *, repeats: int | None = None, budget_s: float | None = None
) -> None:
    """Fill `evidence.replays` (or `evidence.replay_note`) from its traces' replay plans
    (REPEATS pairs per case within BUDGET_S unless told)."""
    why = replay_possible()
    plan = next((t.replay_plan for t in evidence.traces if t.replay_plan.get("cases")), None)
    if not why and plan is None:
        why = "no trace with recorded operator shapes"
    if not why and evidence.uses_cuda():
        why = "the run used a GPU; the replay times CPU operators only"
    if why:
        evidence.replay_note = why
        return
    assert plan is not None
    wanted = wanted_cases(evidence)
    plan = {**plan, "cases": {k: v for k, v in plan["cases"].items() if k in wanted}}
    if not plan["cases"]:
        evidence.replay_note = "no operator fix of this run to replay"
        return
    threads = evidence.fact("threads.intra_op")
    threads = int(threads) if isinstance(threads, (int, float)) and threads >= 1 else 1
    replays, note = replay_plan(
        plan, threads=threads, repeats=repeats or REPEATS, budget_s=budget_s or BUDGET_S
    )
    evidence.replays, unsure = conclusive_only(replays)
    evidence.replay_note = "; ".join(n for n in (note, unsure) if n)


def conclusive_only(replays: dict[str, Replayed]) -> tuple[dict[str, Replayed], str]:
    """The cases whose pairs agree (`Replayed.conclusive`), and a note naming the others:
    their rules estimate from the trace or a prior, as without a replay."""
    kept = {kind: r for kind, r in replays.items() if r.conclusive}
    dropped = [
        f"{kind} (pair ratios {r.ratio_min:.2f}-{r.ratio_max:.2f}x over {r.pairs} pairs)"
        for kind, r in sorted(replays.items())
        if not r.conclusive
    ]
    note = f"replay inconclusive on this host for: {', '.join(dropped)}" if dropped else ""
    return kept, note


def wanted_cases(evidence: RunEvidence) -> set[str]:
    """The cases a rule may read for this run: the inference fixes only for an inference
    workload (and only where their facts point), attention for any."""
    from perfweb_recommender.rules.inference import is_inference

    wanted = {"attention"}
    if is_inference(evidence):
        if evidence.fact("inference.grad_enabled") is True:
            wanted.add("ops")
        if evidence.fact("model.quantized") is not True:
            wanted.add("linear")
        if evidence.fact("model.channels_last") is False:
            wanted.add("conv")
    return wanted


def replay_plan(
    plan: dict[str, Any], *, threads: int, repeats: int = REPEATS, budget_s: float = BUDGET_S
) -> tuple[dict[str, Replayed], str]:
    """Run the plan's cases in a helper process: (results per case, a note on failures)."""
    request = {"plan": plan, "threads": threads, "repeats": repeats, "budget_s": budget_s}
    raw = orjson.dumps(request, option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(raw).hexdigest()
    if digest in _CACHE:
        return _CACHE[digest]
    # Passive OpenMP threads sleep at a barrier instead of spinning: on a busy host a spinning
    # thread that waits for a preempted one would count the wait as CPU time of the operator.
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    env.pop("PERF_AGENT", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "perfweb_recommender.replay.worker"],
            input=raw,
            capture_output=True,
            timeout=TIMEOUT_S,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {}, f"replay failed: {type(exc).__name__}"
    if done.returncode != 0:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
        return {}, f"replay failed (exit {done.returncode}): {last[:200]}"
    try:
        answer = orjson.loads(done.stdout)
    except orjson.JSONDecodeError:
        return {}, "replay failed: unreadable answer"
    result = replays_from(answer, plan)
    failed = sorted(k for k, v in (answer.get("cases") or {}).items() if "error" in v)
    note = f"replay failed for: {', '.join(failed)}" if failed else ""
    _CACHE[digest] = (result, note)
    return result, note


def replays_from(answer: dict[str, Any], plan: dict[str, Any]) -> dict[str, Replayed]:
    """The worker's samples as `Replayed` per case: ratios of interleaved pairs."""
    span = float(plan.get("span_us") or 0.0)
    out: dict[str, Replayed] = {}
    for kind, row in (answer.get("cases") or {}).items():
        a, b = row.get("a_us") or [], row.get("b_us") or []
        pairs = [(x, y) for x, y in zip(a, b, strict=False) if x > 0 and y > 0]
        if len(pairs) < 2 or span <= 0:
            continue
        ratios = [y / x for x, y in pairs]
        wa, wb = row.get("wall_a_us") or [], row.get("wall_b_us") or []
        wall = [y / x for x, y in zip(wa, wb, strict=False) if x > 0 and y > 0]
        traced = float(((plan.get("cases") or {}).get(kind) or {}).get("traced_us") or 0.0)
        out[kind] = Replayed(
            case=kind,
            ratio=statistics.median(ratios),
            ratio_min=min(ratios),
            ratio_max=max(ratios),
            pairs=len(pairs),
            a_us=statistics.median(x for x, _ in pairs),
            b_us=statistics.median(y for _, y in pairs),
            calls=int(row.get("calls") or 0),
            share=min(1.0, traced / span),
            threads=int(answer.get("threads") or 1),
            wall_ratio=statistics.median(wall) if wall else None,
            skipped=int(row.get("skipped") or 0),
        )
    return out
