"""What the agent saw of a run, and what it did not: the evidence behind "no findings".

A doctor that calls a patient it never examined healthy is worse than no doctor. Every
report of a run (the run page, the findings and workload APIs, `python -m perfweb_recommender
analyze` as text and JSON) asks this module, the one engine for "what was not seen", and
says "no findings" only of a run whose evidence was there. `run_coverage` gives the verdict
and `Coverage.missing`, the one list of evidence the rules lacked, each item with what it
blinds and, where known, why it was not seen; `missing_evidence` is that list for evidence
already gathered (a bare trace file too, which has no agent run to judge):

- `not_observed`: no step or request, no profiler trace and no GPU sample. Nothing could be
  diagnosed; the report says what was not seen, why, and the one line that fixes it.
- `partly_observed`: GPU samples or a trace, but no step or request was timed, so every
  step-time rule was blind.
- `observed`: steps or requests were timed.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfweb_recommender.analysis.summary import TraceSummary
from perfweb_recommender.evidence import RunEvidence

# How the agent found the step/request boundaries (fact `steps.source`), best first.
STEP_SOURCES: dict[str, str] = {
    "optimizer": "the primary optimizer's step",
    "backward": "backward passes of the loss",
    "module": "calls of the outermost nn.Module (one request or batch each)",
    "dataloader": "DataLoader iterations",
    "manual": "perfweb_agent.step() calls",
}
WORKLOAD_KINDS = ("training", "inference")  # fact `workload.kind`
NOT_OBSERVED, PARTLY_OBSERVED, OBSERVED = "not_observed", "partly_observed", "observed"
FIX_LINE = "perfweb_agent.step()"
FIX_TEXT = (
    "Mark each step or request yourself: `import perfweb_agent` once, then call "
    "`perfweb_agent.step()` at "
    "the end of every training step or served request."
)
NO_TORCH_REASON = "the process never imported torch, so there was nothing the agent could time"
UNSEEN_REASON = (
    "no optimizer step, no backward pass, no nn.Module call, no DataLoader iteration seen"
)
NO_GPU_REASON = "no GPU the agent could read through NVML"
NO_TRACE_REASON = "no profiler window was captured, as one opens only once steps are timed"
# What each kind of missing evidence blinds: the items of `Coverage.missing`.
MISSING_TRACE = "no profiler trace: kernel times, GPU idle causes, copies and syncs"
MISSING_FACTS = (
    "no agent facts: DataLoader, threads, precision and distributed settings are unknown, so "
    "the rules about them could not run"
)
MISSING_STEPS = "no agent step timings: DataLoader wait and step time not measured"
MISSING_SERIES = "no metric series: GPU utilisation, memory and CPU not measured"
MISSING_GPU = "no GPU samples: GPU utilisation, memory, power and throttling not measured"
HEADLINES = {
    NOT_OBSERVED: "Not examined, so not healthy either: the agent saw no step or request, no "
    "profiler trace and no GPU sample in this run.",
    PARTLY_OBSERVED: "Only partly examined: no step or request was timed, so no rule that "
    "reads step or request times could run.",
}


@dataclass(frozen=True)
class Coverage:
    """Which signals of a run were seen, and what its report may honestly say."""

    verdict: str  # NOT_OBSERVED | PARTLY_OBSERVED | OBSERVED
    kind: str | None  # "training" | "inference" | None when nothing tells
    steps_source: str | None  # a STEP_SOURCES key, or None
    steps: int  # steps (training) or requests (inference) timed
    ranks: int
    traces: int
    gpu_samples: int
    process_samples: int
    host_samples: int
    seen: list[str] = field(default_factory=list)  # e.g. "42 requests", "1 profiler trace"
    not_seen: list[str] = field(default_factory=list)  # e.g. "steps or requests", "GPU samples"
    reason: str = ""  # why the steps were not seen ("" when they were)
    causes: list[str] = field(default_factory=list)  # reason, and why no GPU sample or trace
    # The one list of evidence the rules lacked, each with what it blinds (and why, if known).
    missing: list[str] = field(default_factory=list)
    headline: str = ""  # the statement's first sentence, for a page ("" when observed)
    fix: str = ""  # the one line that fixes it ("" when nothing to fix)
    statement: str = ""  # what a report says instead of "no findings" ("" when observed)
    # What the run's end lost: processes whose agent never sent its last data (`ended_early`).
    lost: list[str] = field(default_factory=list)

    @property
    def unit(self) -> str:
        """What one step is called in this run: "request" (inference) or "step"."""
        return "request" if self.kind == "inference" else "step"

    def no_findings_text(self, *, traces: bool) -> str:
        """What a report says when no rule fired: an all-clear only when the evidence was there."""
        if self.verdict != OBSERVED:
            return self.statement
        what = "metrics or traces" if traces else "metrics"
        if self.lost:
            return (
                f"No finding in what was recorded: nothing in this run's {what} points at a "
                "fix worth making, but the end of the run was lost, unseen."
            )
        return f"No finding: nothing in this run's {what} points at a fix worth making."

    def as_json(self) -> dict[str, Any]:
        """The read API's and the CLI's `coverage` object."""
        return {
            "verdict": self.verdict,
            "kind": self.kind,
            "steps_source": self.steps_source,
            "steps": self.steps,
            "ranks": self.ranks,
            "traces": self.traces,
            "gpu_samples": self.gpu_samples,
            "process_samples": self.process_samples,
            "host_samples": self.host_samples,
            "seen": self.seen,
            "not_seen": self.not_seen,
            "reason": self.reason,
            "causes": self.causes,
            "missing": self.missing,
            "headline": self.headline,
            "fix": self.fix,
            "statement": self.statement,
            "lost": self.lost,
        }


def workload_kind(*, facts: Mapping[str, Any], steps: int) -> str | None:
    """`training` or `inference` as the agent labelled the run (fact `workload.kind`); an
    older agent only timed optimizer steps, so its steps mean training; else None."""
    kind = facts.get("workload.kind")
    if kind in WORKLOAD_KINDS:
        return str(kind)
    source = facts.get("steps.source")
    if source in ("optimizer", "backward"):
        return "training"
    if source == "module":
        return "inference"
    return "training" if steps else None


def run_coverage(
    *,
    facts: Mapping[str, Any],
    steps: int,
    ranks: int = 0,
    traces: int = 0,
    gpu_samples: int = 0,
    process_samples: int = 0,
    host_samples: int = 0,
    trace_gaps: Sequence[str] = (),
    agent_run: bool = True,
    lost: Sequence[str] = (),
) -> Coverage:
    """The coverage of one run from counts of what was stored (the one engine behind every
    report's verdict). `steps` counts steps or requests over all ranks; `trace_gaps` are
    what the run's traces themselves lack (`trace_gaps()`, where the traces were read). Not
    an `agent_run` (bare trace files): `missing` gives no agent-side reasons. `lost`: what the
    run's end lost (`ended_early`), also listed in `missing`."""
    kind = workload_kind(facts=facts, steps=steps)
    source = facts.get("steps.source")
    unit = "request" if kind == "inference" else "step"
    seen = _seen(
        (steps, _count(steps, unit) + (f" on {_count(ranks, 'rank')}" if ranks > 1 else "")),
        (traces, _count(traces, "profiler trace")),
        (gpu_samples, _count(gpu_samples, "GPU sample")),
        (process_samples, _count(process_samples, "process sample")),
        (host_samples, _count(host_samples, "host sample")),
    )
    not_seen = [
        text
        for count, text in ((steps, "steps or requests"), (traces, "profiler traces"),
                            (gpu_samples, "GPU samples"))
        if not count
    ]  # fmt: skip
    verdict = OBSERVED if steps else PARTLY_OBSERVED if traces or gpu_samples else NOT_OBSERVED
    reason = "" if steps else (UNSEEN_REASON if facts.get("torch.version") else NO_TORCH_REASON)
    causes = [reason] if reason else []
    causes += [] if gpu_samples else [NO_GPU_REASON]
    causes += [] if traces else [NO_TRACE_REASON]
    missing = _missing(traces=traces, trace_gaps=trace_gaps, facts=bool(facts), steps=steps,
                       why=agent_run, steps_reason=reason, gpu_samples=gpu_samples,
                       other_samples=process_samples + host_samples)  # fmt: skip
    missing += lost
    return Coverage(
        verdict=verdict,
        kind=kind,
        steps_source=str(source) if source in STEP_SOURCES else None,
        steps=steps,
        ranks=ranks,
        traces=traces,
        gpu_samples=gpu_samples,
        process_samples=process_samples,
        host_samples=host_samples,
        seen=seen,
        not_seen=not_seen,
        reason=reason,
        causes=causes if verdict != OBSERVED else [],
        missing=missing,
        headline=HEADLINES.get(verdict, ""),
        fix="" if steps else FIX_LINE,
        statement=_statement(verdict=verdict, reason=reason, seen=seen),
        lost=list(lost),
    )


def worker_name(rank: int | None, *, workers: int) -> str:
    """How a report names a worker process: "the script" when it is the run's only one and
    has no rank (`perf-agent attach -- python train.py`), else "rank N"."""
    return "the script" if workers == 1 and rank is None else f"rank {rank or 0}"


def ended_early(*, exit_code: int | None, silent: Sequence[str]) -> list[str]:
    """What a finished run's end lost: each process (`silent`: "rank 0", "the script")
    whose agent never sent its final data, and why where the exit status says so
    (128 + N, or -N: killed by signal N). A SIGTERM or SIGKILL ends Python before its
    exit handlers run, so the agent's last seconds of steps and samples and a profiler
    window still open are gone: a report must not read as if it had seen them."""
    how = "ended"
    if exit_code is not None and (exit_code > 128 or exit_code < 0):
        number = exit_code - 128 if exit_code > 128 else -exit_code
        try:
            how = f"was killed by signal {number} ({signal.Signals(number).name})"
        except ValueError:
            how = f"was killed by signal {number}"
    elif exit_code is not None:
        how = f"ended (exit code {exit_code})"
    return [
        f"{who}'s agent sent no final data: its process {how} before the agent could flush, "
        "so the last seconds of its steps and samples, and a profiler window still open, are "
        "missing"
        for who in silent
    ]


def _seen(*counted: tuple[int, str]) -> list[str]:
    return [text for count, text in counted if count]


def _statement(*, verdict: str, reason: str, seen: list[str]) -> str:
    if verdict == OBSERVED:
        return ""
    if verdict == PARTLY_OBSERVED:
        return (
            f"Only partly examined: no step or request was timed ({reason}), so no rule that "
            f"reads step or request times could run; only {', '.join(seen)} were seen. "
            f"{FIX_TEXT}"
        )
    causes = "; ".join((reason, NO_GPU_REASON, NO_TRACE_REASON))
    return f"{HEADLINES[NOT_OBSERVED][:-1]} ({causes}). {FIX_TEXT}"


def _missing(
    *,
    traces: int,
    trace_gaps: Sequence[str],
    why: bool,
    facts: bool,
    steps: int,
    steps_reason: str,
    gpu_samples: int,
    other_samples: int,
) -> list[str]:
    """`Coverage.missing`: each kind of evidence not seen, what it blinds, and (`why`) why."""
    missing = (
        [] if traces else [MISSING_TRACE + (f" ({NO_TRACE_REASON})" if why and not steps else "")]
    )
    missing += trace_gaps
    missing += [] if facts else [MISSING_FACTS]
    missing += [] if steps else [MISSING_STEPS + (f" ({steps_reason})" if why else "")]
    if not gpu_samples:
        missing.append(f"{MISSING_GPU} ({NO_GPU_REASON})" if other_samples else MISSING_SERIES)
    return missing


def trace_gaps(traces: Sequence[TraceSummary]) -> list[str]:
    """What each analysed trace lacks: CPU operators, step markers, GPU kernels."""
    gaps: list[str] = []
    for trace in traces:
        where = f"trace rank {trace.rank}"
        if trace.cpu_events == 0:
            gaps.append(
                f"{where} has GPU events only (no CPU operators): DataLoader waits, steps, "
                "tiny-operator overhead and the model's operators (attention, DataParallel) "
                "cannot be judged"
            )
        elif not trace.steps:
            gaps.append(
                f"{where} has no ProfilerStep markers: GPU shares are of the first-to-last "
                "kernel span, not of a step"
            )
        if not trace.launch.get("kernels") and trace.cpu_events:
            gaps.append(f"{where} has no GPU kernels (a CPU-only trace)")
    return gaps


def evidence_coverage(evidence: RunEvidence, *, agent_run: bool = True) -> Coverage:
    """The coverage of evidence already gathered (the offline CLI's input; `agent_run`
    False for trace files alone)."""
    gpu = sum(len(s.v) for s in evidence.series if s.name.startswith("gpu."))
    process = sum(len(s.v) for s in evidence.series if s.name.startswith("process."))
    host = sum(len(s.v) for s in evidence.series if s.device == "host")
    return run_coverage(
        facts=evidence.facts,
        steps=len(evidence.steps),
        ranks=len({s.rank for s in evidence.steps}),
        traces=len(evidence.traces),
        gpu_samples=gpu,
        process_samples=process,
        host_samples=host,
        trace_gaps=trace_gaps(evidence.traces),
        agent_run=agent_run,
        lost=ended_early(exit_code=evidence.exit_code, silent=evidence.silent_agents),
    )


def missing_evidence(evidence: RunEvidence, *, agent_run: bool = True) -> list[str]:
    """What the evidence lacks, in words, so that "no findings" is never read as "healthy"
    when the rules had nothing to look at: `Coverage.missing` of evidence already gathered,
    a bare trace file's (no agent run) too."""
    return evidence_coverage(evidence, agent_run=agent_run).missing


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
