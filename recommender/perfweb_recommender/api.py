"""One entry point for any input: a trace file, a directory of rank traces, or an agent's
offline directory -> the report (per-rank analyses + ranked findings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfweb_recommender.analysis.summary import TraceSummary, summarize
from perfweb_recommender.anatomy import step_anatomy
from perfweb_recommender.compute import utilisation
from perfweb_recommender.coverage import Coverage, evidence_coverage
from perfweb_recommender.errors import InputError
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.inference import evidence_request_stats, served_after_training
from perfweb_recommender.offline import find_runs, load_run
from perfweb_recommender.ranks import summarize_files
from perfweb_recommender.replay import replay_evidence
from perfweb_recommender.replay.plan import plan_for
from perfweb_recommender.rules import diagnose
from perfweb_recommender.rules.base import Finding, split_findings
from perfweb_recommender.trace.loader import load_trace, trace_files


@dataclass
class Report:
    """What `analyze` returns: the analysed traces, the findings (best first), and context."""

    traces: list[TraceSummary]
    findings: list[Finding]  # the workload's fixes, best first
    run_id: str | None = None
    notes: list[str] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)  # the agent's step timings, summarised
    # Evidence the rules could not read: `coverage.missing` (for a bare trace file too).
    missing: list[str] = field(default_factory=list)
    coverage: Coverage | None = None  # what the agent saw (None for a bare trace file)
    # Host conditions (risk `system`: contention, throttling): shown apart, never ranked
    # among the fixes (rules.base.split_findings).
    host_conditions: list[Finding] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The CLI's JSON document."""
        ranks: dict[str, Any] = {}
        for trace in self.traces:
            key = str(trace.rank)
            n = 1
            while key in ranks:  # several profiler windows of one rank
                n += 1
                key = f"{trace.rank}#{n}"
            ranks[key] = trace.as_json()
        return {
            "run_id": self.run_id,
            "run": self.run,
            "ranks": ranks,
            "findings": [f.as_json() for f in self.findings],
            "host_conditions": [f.as_json() for f in self.host_conditions],
            "notes": self.notes,
            "missing_evidence": self.missing,
            "coverage": self.coverage.as_json() if self.coverage else None,
        }


def analyze_evidence(
    evidence: RunEvidence, *, run_id: str | None = None, agent_run: bool = True
) -> Report:
    """Diagnose already-gathered evidence (what the server-side adapter calls). An agent's
    run (`agent_run`) also gets its coverage: what was seen, and what was not."""
    coverage = evidence_coverage(evidence, agent_run=agent_run)
    notes = []
    planned = any(t.replay_plan.get("cases") for t in evidence.traces)
    if evidence.replay_note and planned and not evidence.replay_note.startswith("replay turned"):
        # a trace had shapes to replay, but they were not (torch absent, a GPU run, a failure)
        notes.append(f"operator fixes not replayed: {evidence.replay_note}")
    fixes, host_conditions = split_findings(diagnose(evidence))
    return Report(
        traces=evidence.traces,
        findings=fixes,
        host_conditions=host_conditions,
        run_id=run_id,
        notes=notes + [f"rank {t.rank}: {t.degraded}" for t in evidence.traces if t.degraded],
        run=_run_summary(evidence, coverage=coverage if agent_run else None),
        missing=coverage.missing,
        coverage=coverage if agent_run else None,
    )


def _run_summary(evidence: RunEvidence, *, coverage: Coverage | None) -> dict[str, Any]:
    """Training: step count, median step and data-wait share from the agent's step timings.
    Inference: requests, latency percentiles, throughput and peak memory."""
    if coverage is not None and coverage.kind == "inference":
        stats = evidence_request_stats(evidence)
        base = {"kind": "inference", "steps_source": coverage.steps_source}
        summary = {**base, **stats.as_json(windows=False)} if stats else {**base, "requests": 0}
        return {**summary, "anatomy": _anatomy_json(evidence)}
    if not evidence.steps:
        return {}
    waits = [s for s in evidence.steady_steps() if s.data_wait_s is not None]
    total = sum(s.duration_s for s in waits)
    served = served_after_training(evidence)  # a script that trained, then served
    return {
        "kind": "training",
        "steps_source": coverage.steps_source if coverage else None,
        "steps": len(evidence.steps),
        "ranks": len({s.rank for s in evidence.steps}),
        "median_step_s": evidence.median_step_s(),
        "data_wait_share": sum(s.data_wait_s or 0.0 for s in waits) / total if total else None,
        "anatomy": _anatomy_json(evidence),
        "compute": utilisation(evidence).as_json(),
        "served": served.as_json(windows=False) if served is not None else None,
    }


def _anatomy_json(evidence: RunEvidence) -> dict[str, Any] | None:
    anatomy = step_anatomy(evidence)
    return anatomy.as_json() if anatomy is not None else None


def analyze_path(path: str | Path) -> Report:
    """Analyse a trace file, a directory of rank traces, or an agent offline directory."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if path.is_file():
        evidence = RunEvidence(traces=[_summary(path, 0)])
        replay_evidence(evidence)
        return analyze_evidence(evidence, agent_run=False)
    runs = find_runs(path)
    if runs:
        run = runs[-1]
        evidence, _ = load_run(run)
        replay_evidence(evidence)
        report = analyze_evidence(evidence, run_id=run.run_id)
        if len(runs) > 1:
            report.notes.append(f"{len(runs)} runs in {path}; analysed the latest, {run.run_id}")
        return report
    files = trace_files(path)
    if not files:
        raise InputError(
            f"{path}: neither a trace file, a directory of traces, nor an agent directory"
        )
    summaries = summarize_files(files)
    for summary, file in zip(summaries, files, strict=True):
        summary.replay_plan = plan_for(summary, file)
    evidence = RunEvidence(traces=sorted(summaries, key=lambda t: t.rank))
    replay_evidence(evidence)
    return analyze_evidence(evidence, agent_run=False)


def _summary(path: Path, rank: int) -> TraceSummary:
    """One trace file analysed, with its replay plan (perfweb_recommender.replay.plan)."""
    summary = summarize(load_trace(path, fallback_rank=rank))
    summary.replay_plan = plan_for(summary, path)
    return summary
