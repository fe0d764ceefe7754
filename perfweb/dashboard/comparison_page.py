"""The comparison page's context: each later run against the first (perfweb.diagnostics.
comparison computes; this shapes it for the template and the page's script)."""

from __future__ import annotations

from typing import Any

from perfweb.diagnostics.comparison import pair_comparison, run_steps, thinned
from perfweb.diagnostics.formatting import pct
from perfweb.runs.models import Run
from perfweb_contract.api import RUN_TIMELINE_PATH
from perfweb_contract.knobs import FACT_KNOBS
from perfweb_recommender.compare import speed_words
from perfweb_recommender.evidence import training_step_count

MAX_RUNS = 4
CHART_STEPS = 3000  # steps per run sent to the page for the distributions and bands


def compare_context(*, runs: list[Run]) -> dict[str, Any]:
    base, others = runs[0], runs[1:]
    pairs = [
        {**_pair_view(pair_comparison(a=base, b=other)), "letter": _letter(index)}
        for index, other in enumerate(others, start=1)
    ]
    return {
        "runs": [_run_view(run, index) for index, run in enumerate(runs)],
        "pairs": pairs,
        "page_config": {
            "runs": [_run_series(run, index) for index, run in enumerate(runs)],
            "timelineApi": RUN_TIMELINE_PATH.format(run_id="RUN_ID"),
        },
    }


def _letter(index: int) -> str:
    return "ABCDEFGH"[index]


def _run_view(run: Run, index: int) -> dict[str, Any]:
    return {
        "letter": _letter(index),
        "id": run.run_id,
        "name": run.name or run.run_id,
        "status": run.status,
        "started_at": run.started_at,
        "steps": training_step_count(counted=run.step_count, facts=run.facts or {})[0],
        # the knobs the agent applied in this run (a job's candidate, `perf-agent ab`)
        "knobs": (run.facts or {}).get(FACT_KNOBS, ""),
    }


def _run_series(run: Run, index: int) -> dict[str, Any]:
    t, durations, _ = run_steps(run=run)
    start = run.started_at.timestamp()
    return {
        "letter": _letter(index),
        "id": run.run_id,
        "name": run.name or run.run_id,
        "start": start,
        "t": [round(x - start, 3) for x in thinned(t, points=CHART_STEPS)],
        "steps": thinned(durations, points=CHART_STEPS),
    }


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:,.2f} ms"


def _stats_view(stats: dict[str, Any] | None) -> dict[str, str]:
    if not stats:
        return {"median": "—", "p10": "—", "p90": "—", "count": "0"}
    return {
        "median": _ms(stats["median_s"]),
        "p10": _ms(stats["p10_s"]),
        "p90": _ms(stats["p90_s"]),
        "count": f"{stats['count']:,}",
    }


def _pair_view(pair: dict[str, Any]) -> dict[str, Any]:
    ratio = pair["ratio"]
    return {
        **pair,
        "a_view": _stats_view(pair["a_stats"]),
        "b_view": _stats_view(pair["b_stats"]),
        "a_wait": _ms(pair["a_wait_s"]),
        "b_wait": _ms(pair["b_wait_s"]),
        "change": pct(ratio["ratio"] - 1) if ratio else "—",
        "interval": f"{pct(ratio['low'] - 1)} to {pct(ratio['high'] - 1)}" if ratio else "—",
        "verdict": _verdict(ratio),
        "speed": speed_words(ratio["ratio"]) if ratio else "—",
        "phase_rows": _phase_rows(pair.get("phases")),
    }


def _phase_rows(phases: dict[str, Any] | None) -> list[dict[str, str]]:
    """The step anatomy's diff as table rows: each phase's change, largest first."""
    if not phases:
        return []
    deltas = sorted(phases["deltas_s"].items(), key=lambda kv: -abs(kv[1]))
    return [
        {
            "phase": name.replace("_", " "),
            "delta": f"{delta * 1000:+,.2f} ms",
            "direction": "up" if delta > 0 else "down",
        }
        for name, delta in deltas
    ]


def _verdict(ratio: dict[str, Any] | None) -> str:
    if ratio is None:
        return "too few steps"
    if ratio["regressed"]:
        return "slower"
    return "faster" if ratio["improved"] else "no difference beyond the noise"
