"""The human-readable report of `python -m perfweb_recommender analyze`."""

from __future__ import annotations

from typing import Any

from perfweb_recommender.analysis.summary import TraceSummary
from perfweb_recommender.api import Report
from perfweb_recommender.compute import rate
from perfweb_recommender.coverage import FIX_TEXT, OBSERVED, STEP_SOURCES
from perfweb_recommender.rules.base import Finding, counted
from perfweb_recommender.units import format_value


def _rank_lines(trace: TraceSummary) -> list[str]:
    t = trace.temporal.as_dict()
    lines = [f"rank {trace.rank}  ({trace.source})"]
    if t["kernel_span_us"] > 0:
        lines.append(
            f"  GPU time over the first-to-last kernel span "
            f"({t['kernel_span_us'] / 1e3:.1f} ms, HTA's span): "
            f"idle {t['idle_pct']:.1f}%  compute {t['compute_pct']:.1f}%  "
            f"non-compute {t['non_compute_pct']:.1f}%"
        )
    else:
        lines.append("  no GPU activity in this trace")
    causes = _idle_causes(trace)
    if causes:
        lines.append(f"  idle time by cause (all streams): {causes}")
    kinds = ", ".join(
        f"{label.lower()} {row['pct']:.1f}%"
        for label, row in trace.kernel_breakdown.items()
        if row["pct"] >= 0.5
    )
    if kinds:
        lines.append(f"  GPU busy time: {kinds}")
    if trace.comm_comp_overlap_pct is not None:
        lines.append(f"  communication overlapped by compute: {trace.comm_comp_overlap_pct:.1f}%")
    if trace.steps:
        mean = trace.mean_step_us or 0.0
        shares = ", ".join(f"{k} {v:.0%}" for k, v in trace.step_shares.items() if v >= 0.005)
        lines.append(f"  {counted(len(trace.steps), 'step')}, mean {mean / 1e3:.1f} ms: {shares}")
    if trace.step_timeline:
        s = trace.step_timeline
        lines.append(
            f"  GPU time inside the GPU-side ProfilerSteps ({s['span_us'] / 1e3:.1f} ms, "
            f"TraceLens' span): busy {s['busy_pct']:.1f}%  idle {s['idle_pct']:.1f}%"
        )
    return lines


def _idle_causes(trace: TraceSummary) -> str:
    totals = {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}
    for stream in trace.idle_breakdown.values():
        for cause, row in stream.items():
            totals[cause] += row["us"]
    idle = sum(totals.values())
    if idle <= 0:
        return ""
    return ", ".join(f"{cause.replace('_', ' ')} {us / idle:.0%}" for cause, us in totals.items())


def _finding_lines(position: int, finding: Finding, *, unit: str = "step") -> list[str]:
    gain = (
        f"~{finding.estimated_gain:.0%} of {unit} time"
        if finding.estimated_gain
        else "no time estimate"
    )
    if finding.measured_gain is not None:
        gain = f"measured {finding.measured_gain:.0%}"
    lines = [
        f"{f'{position}. ' if position else '- '}[{finding.id}] {finding.title}",
        f"   gain {gain} ({finding.gain_basis})",
        f"   confidence {finding.confidence:.0%}, risk class {finding.risk}",
    ]
    for item in finding.evidence:
        value = format_value(item.value, item.display_unit)  # `100.0 %`, never `1 fraction`
        lines.append(f"   - {item.label}: {value} [{item.source}]")
    lines.append(f"   fix: {finding.fix.text}")
    lines += [f"     | {line}" for line in finding.fix.snippet.splitlines()]
    if finding.fix.knob:
        lines.append(f"     knob: {finding.fix.knob}")
    return lines


def _anatomy_lines(anatomy: dict[str, Any] | None) -> list[str]:
    """ "  where the step goes: backward 57%, forward 20%, ..." and the warm-up left out."""
    if not anatomy:
        return []
    shares = sorted(anatomy["shares"].items(), key=lambda kv: -kv[1])
    parts = [
        f"{name.replace('_', ' ')} {share:.0%} ({anatomy['phases_s'][name] * 1e3:.1f} ms)"
        for name, share in shares
        if share >= 0.005
    ]
    lines = [f"  where the step goes (median of {anatomy['steps']} steps): " + ", ".join(parts)]
    lines += [f"  left out of the medians: {w['text']}" for w in anatomy["warmup"]]
    return lines


def _compute_line(compute: dict[str, Any] | None) -> list[str]:
    """ "  MFU 62%: 8.4 of 13.6 TFLOP/s (...)", or why it is not known."""
    if not compute:
        return []
    if compute.get("mfu") is None:
        return [f"  MFU not known: {compute['reason']}"]
    return [
        f"  MFU {compute['mfu']:.1%}: {rate(compute['achieved_flops'])} of "
        f"{rate(compute['peak_flops'])} ({compute['peak_source']}; "
        f"{compute['flops_per_step'] / 1e9:.3g} GFLOPs per step)"
    ]


def _run_lines(run: dict[str, Any]) -> list[str]:
    if not run:
        return []
    return (
        _summary_lines(run) + _anatomy_lines(run.get("anatomy")) + _compute_line(run.get("compute"))
    )


def _summary_lines(run: dict[str, Any]) -> list[str]:
    if run.get("kind") == "inference":
        if not run.get("requests"):
            return []
        return _request_lines(run, f"timed by the agent on {run['ranks']} rank(s)")
    if not run.get("steps"):
        return []
    wait = run.get("data_wait_share")
    waiting = f", {wait:.0%} of it waiting for data" if wait is not None else ""
    lines = [
        f"{counted(run['steps'], 'step')} timed by the agent on {run['ranks']} rank(s): "
        f"median {run['median_step_s'] * 1e3:.1f} ms{waiting}"
    ]
    served = run.get("served")
    if served and served.get("requests"):  # a script that trained, then served
        lines += ["Requests after training:"] + [
            "  " + line
            for line in _request_lines(served, "after the last optimizer step, time in the model")
        ]
    return lines


def _request_lines(run: dict[str, Any], timed: str) -> list[str]:
    """Latency percentiles, throughput and peak memory of requests (RequestStats' JSON)."""
    sps = run.get("throughput_sps")
    rps = run.get("throughput_rps")
    lines = [
        f"{counted(run['requests'], 'request')} {timed}: "
        "latency "
        f"p50 {run['latency_p50_s'] * 1e3:.1f} ms, p95 {run['latency_p95_s'] * 1e3:.1f} ms, "
        f"p99 {run['latency_p99_s'] * 1e3:.1f} ms"
        + (
            f" ({run['profiled_requests']} inside profiler windows left out)"
            if run.get("profiled_requests")
            else ""
        ),
        "  throughput "
        + (f"{rps:.2f} requests/s" if rps is not None else "unknown")
        + (f", {sps:.1f} samples/s" if sps is not None else " (no batch sizes reported)"),
    ]
    memory = [
        f"{label} {value / 2**20:.1f} MiB"
        for label, value in (
            ("RSS", run.get("peak_rss_bytes")),
            ("CUDA allocated", run.get("peak_cuda_allocated_bytes")),
        )
        if value is not None
    ]
    if memory:
        lines.append("  peak memory: " + ", ".join(memory))
    return lines


def render_text(report: Report) -> str:
    """The report as plain text: what was seen, per-rank summaries, then the ranked findings
    (or, with none, an all-clear only when the evidence was there)."""
    lines: list[str] = []
    if report.run_id:
        lines.append(f"run {report.run_id}")
    lines += report.notes
    coverage = report.coverage
    if coverage is not None and coverage.failure:  # the news of a failed run comes first
        lines.append(f"failed: {coverage.failure}")
    if coverage is not None:
        source = (
            f", boundaries from {STEP_SOURCES[coverage.steps_source]}"
            if (coverage.steps_source)
            else ""
        )
        lines.append(f"workload: {coverage.kind or 'unknown'}{source}")
        lines.append("seen: " + (", ".join(coverage.seen) or "nothing"))
        lines += coverage.profiler
    lines += _run_lines(report.run)
    for trace in report.traces:
        lines += _rank_lines(trace)
    lines.append("")
    examined = coverage is None or coverage.verdict == OBSERVED
    if coverage is not None and not examined:
        lines.append(coverage.headline)
    unit = coverage.unit if coverage is not None else "step"
    if report.findings:
        lines.append("Findings, best first:")
        for position, finding in enumerate(report.findings, start=1):
            lines += _finding_lines(position, finding, unit=unit)
    elif coverage is not None and examined:  # clean, as far as it goes
        lines.append(coverage.no_findings_text(traces=bool(report.traces)))
    elif coverage is None and not report.missing:
        lines.append("No findings: nothing in the evidence points at a known bottleneck.")
    if report.missing:  # the one list of what was not seen; never an all-clear for it
        heading = "Not judged, for lack of this evidence:"
        if report.findings:
            heading = "Not judged, evidence missing:"
        elif coverage is None:
            heading = "No findings, but this evidence was missing:"
        lines.append(heading)
        lines += [f"  - {item}" for item in report.missing]
    if coverage is not None and coverage.fix:
        lines.append(f"fix: {coverage.fix} — {FIX_TEXT}")
    lines += _host_condition_lines(report.host_conditions, unit=unit)
    return "\n".join(lines) + "\n"


HOST_CONDITIONS_HEADING = (
    "Host conditions (about the machine, not the script; not ranked among the fixes):"
)


def _host_condition_lines(conditions: list[Finding], *, unit: str) -> list[str]:
    """The host conditions in their own section, after the workload's fixes: they explain
    inflated figures, they are not the script's to fix."""
    if not conditions:
        return []
    lines = ["", HOST_CONDITIONS_HEADING]
    for finding in conditions:
        lines += _finding_lines(0, finding, unit=unit)
    return lines
