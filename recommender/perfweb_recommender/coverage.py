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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfweb_contract import protocol
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.run_end import ended_early, failure_line
from perfweb_recommender.trace_notes import profiler_notes, trace_gaps

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
# How a page that summarises runs (the fleet page, the runs list) names each verdict.
VERDICT_LABELS = {
    NOT_OBSERVED: "not examined",
    PARTLY_OBSERVED: "partly observed",
    OBSERVED: "observed",
}
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
UNTIMED_SERVING = (
    "requests after training: {calls} of another copy of the model after the last optimizer "
    "step were not timed (the agent times the model the script trained), so the report has "
    "no latency or throughput for them; serve the trained model object itself, or run the "
    "serving part on its own under perf-agent attach"
)

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
    # How the profiler windows were recorded, where not as asked (`profiler_notes`).
    profiler: list[str] = field(default_factory=list)
    # A run that failed: its exit code and last error line, what every report leads with
    # ("" for a run that ended well or is still going; `failure_line`).
    failure: str = ""
    exit_code: int | None = None
    error: str = ""
    pre_training_calls: int = 0  # module calls before training, re-labelled (not steps)
    # A script that trained, then served: the model's calls after the last optimizer step
    # the agent timed, and those of another copy of the model it could not time.
    served_after_training: int = 0
    untimed_after_training: int = 0

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
            "pre_training_calls": self.pre_training_calls,
            "served_after_training": self.served_after_training,
            "untimed_after_training": self.untimed_after_training,
            "failure": self.failure or None,
            "exit_code": self.exit_code,
            "error": self.error or None,
            "statement": self.statement,
            "lost": self.lost,
            "profiler": self.profiler,
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
    exit_code: int | None = None,
    error: str = "",
    pre_training_calls: int = 0,
) -> Coverage:
    """The coverage of one run from counts of what was stored (the one engine behind every
    report's verdict). `steps` counts steps or requests over all ranks; `trace_gaps` are
    what the run's traces themselves lack (`trace_gaps()`, where the traces were read). Not
    an `agent_run` (bare trace files): `missing` gives no agent-side reasons. `lost`: what the
    run's end lost (`ended_early`), also listed in `missing`. `exit_code` and `error` (the
    fact `run.error`, the script's last error line): a failed run leads with them, and is not
    told to mark its steps (it did not fail for want of them)."""
    failure = failure_line(exit_code=exit_code, error=error)
    served, untimed = (
        _whole(facts.get(protocol.FACT_SERVED)),
        _whole(facts.get(protocol.FACT_SERVED_UNTIMED)),
    )
    kind = workload_kind(facts=facts, steps=steps)
    source = facts.get("steps.source")
    unit = "request" if kind == "inference" else "step"
    seen = _seen(
        (steps, _count(steps, unit) + (f" on {_count(ranks, 'rank')}" if ranks > 1 else "")),
        (traces, _count(traces, "profiler trace")),
        (gpu_samples, _count(gpu_samples, "GPU sample")),
        (process_samples, _count(process_samples, "process sample")),
        (host_samples, _count(host_samples, "host sample")),
        (
            pre_training_calls,
            _count(pre_training_calls, "module call") + " before the first "
            "optimizer step (evaluation or warm-up, not counted as steps)",
        ),
        (
            served,
            _count(served, "request") + " after the last optimizer step (the model "
            "in eval: served, or a final evaluation)",
        ),
    )
    not_seen = [
        text
        for count, text in (
            (steps, "steps or requests"),
            (traces, "profiler traces"),
            (gpu_samples, "GPU samples"),
        )
        if not count
    ]
    verdict = OBSERVED if steps else PARTLY_OBSERVED if traces or gpu_samples else NOT_OBSERVED
    reason = "" if steps else (UNSEEN_REASON if facts.get("torch.version") else NO_TORCH_REASON)
    if failure and not steps:
        reason = "the run failed before its first step"
    causes = [reason] if reason else []
    causes += [] if gpu_samples else [NO_GPU_REASON]
    causes += [] if traces else [NO_TRACE_REASON]
    skipped = facts.get("profiler.skipped")
    trace_reason = str(skipped) if skipped else "" if steps else NO_TRACE_REASON
    missing = _missing(
        traces=traces,
        trace_gaps=trace_gaps,
        facts=bool(facts),
        steps=steps,
        why=agent_run,
        steps_reason=reason,
        trace_reason=trace_reason,
        gpu_samples=gpu_samples,
        other_samples=process_samples + host_samples,
    )
    missing += lost
    if untimed:
        not_seen.append("requests after training")
        missing.append(UNTIMED_SERVING.format(calls=_count(untimed, "call")))
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
        headline=f"The run failed: {failure}." if failure else HEADLINES.get(verdict, ""),
        fix="" if steps or failure else FIX_LINE,
        statement=_statement(verdict=verdict, reason=reason, seen=seen, failure=failure),
        lost=list(lost),
        profiler=profiler_notes(facts),
        failure=failure,
        exit_code=exit_code if failure else None,
        error=error if failure else "",
        pre_training_calls=pre_training_calls,
        served_after_training=served,
        untimed_after_training=untimed,
    )


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _seen(*counted: tuple[int, str]) -> list[str]:
    return [text for count, text in counted if count]


def _statement(*, verdict: str, reason: str, seen: list[str], failure: str = "") -> str:
    if verdict == OBSERVED:
        return ""
    if failure:  # the error is the news, and its fix is the script's, not a step marker
        what = f"the agent saw {', '.join(seen)} before it ended" if seen else "nothing was seen"
        return f"The run failed: {failure}. No step or request was timed ({what})."
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
    trace_reason: str,
    gpu_samples: int,
    other_samples: int,
) -> list[str]:
    """`Coverage.missing`: each kind of evidence not seen, what it blinds, and (`why`) why."""
    why_trace = f" ({trace_reason})" if why and trace_reason else ""
    missing = [] if traces else [MISSING_TRACE + why_trace]
    missing += trace_gaps
    missing += [] if facts else [MISSING_FACTS]
    missing += [] if steps else [MISSING_STEPS + (f" ({steps_reason})" if why else "")]
    if not gpu_samples:
        missing.append(f"{MISSING_GPU} ({NO_GPU_REASON})" if other_samples else MISSING_SERIES)
    return missing


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
        exit_code=evidence.exit_code,
        error=str(evidence.fact("run.error", "")),
        pre_training_calls=evidence.pre_training_calls,
    )


def missing_evidence(evidence: RunEvidence, *, agent_run: bool = True) -> list[str]:
    """What the evidence lacks, in words, so that "no findings" is never read as "healthy"
    when the rules had nothing to look at: `Coverage.missing` of evidence already gathered,
    a bare trace file's (no agent run) too."""
    return evidence_coverage(evidence, agent_run=agent_run).missing


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
