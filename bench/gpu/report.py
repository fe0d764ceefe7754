"""The kit's report: outcomes per planted cause added to the stages' raw results, the JSON's
shape checked, and the readable Markdown summary.

`build_report(raw)` is pure (the recorded example in tests/bench_gpu/fixtures goes through it
as a real run's results do); `validate_report` lists what is wrong with a report's shape;
`load_report(path)` reads one back and refuses a malformed one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.gpu.expectations import (
    BY_WORKLOAD,
    HEALTHY_GAIN_MAX,
    PHASE_SUM_ERROR_MAX,
    Expectation,
)

SCHEMA = "perfweb.gpu-check/1"
OUTCOMES = (
    "found_first", "found_lower", "missed", "inputs_only", "clean", "false_alarm",
    "failed", "not_analysed", "skipped",
)  # fmt: skip
GIB = float(1 << 30)
IDLE_MEMORY_BYTES = 1 << 30  # the idle-memory rule's "holding the GPU" (recommender)
# Findings a CPU run of the kit gets from its own settings (one intra-op thread on a CPU).
KIT_SETTING_FINDINGS = frozenset({"cpu.threads_too_few"})


def outcome(expectation: Expectation, diag: dict[str, Any]) -> dict[str, Any]:
    """How the recommender did on one workload: found first / found lower / missed (and why
    not judged: the workload failed or was skipped, the analysis failed; the healthy loop:
    clean / false alarm). A failed workload is never judged on what it left behind."""
    base: dict[str, Any] = {"finding": expectation.finding, "plant": expectation.plant}
    if diag.get("status") in ("skipped", "failed"):
        return {**base, "outcome": diag["status"], "detail": diag.get("error")}
    analysis = diag.get("analysis") or {}
    if analysis.get("status") != "ok":
        return {**base, "outcome": "not_analysed", "detail": analysis.get("error")}
    # Findings of the `system` class are about the host (contention from other work,
    # throttling), not the workload's planted cause: recorded, but not ranked against it.
    every = (analysis.get("findings") or []) + (analysis.get("host_conditions") or [])
    findings = [f for f in every if f.get("risk") != "system"]
    if not str((diag.get("workload") or {}).get("device") or "").startswith("cuda"):
        # On a CPU the kit runs its loops on one intra-op thread (workloads.run_workload):
        # a finding about that thread count names the kit's setting, not the workload.
        kit_own = [f["id"] for f in findings if f["id"] in KIT_SETTING_FINDINGS]
        findings = [f for f in findings if f["id"] not in KIT_SETTING_FINDINGS]
        if kit_own:
            base["kit_setting_findings"] = kit_own
    ids = [f["id"] for f in findings]
    top = ids[0] if ids else None
    base.update(top=top, ranked=ids[:5])
    host = [f["id"] for f in every if f.get("risk") == "system"]
    if host:
        base["host_findings"] = host
    if expectation.finding is None:
        big = [f["id"] for f in findings if (f.get("estimated_gain") or 0) >= HEALTHY_GAIN_MAX]
        return {
            **base,
            "outcome": "false_alarm" if big else "clean",
            "detail": f"findings claiming >= {HEALTHY_GAIN_MAX:.0%}: {big}",
        }
    if expectation.finding in ids:
        rank = ids.index(expectation.finding) + 1
        return {**base, "outcome": "found_first" if rank == 1 else "found_lower", "rank": rank}
    if expectation.needs_window_s:
        return {**base, **_inputs_only(expectation, diag)}
    return {**base, "outcome": "missed", "rank": None}


def _inputs_only(expectation: Expectation, diag: dict[str, Any]) -> dict[str, Any]:
    """A rule that needs a longer window than the kit can give: are its inputs there?"""
    devices = (diag.get("nvml") or {}).get("devices") or {}
    idle = max((d.get("idle_window_s") or 0.0 for d in devices.values()), default=0.0)
    held = max((d.get("memory_held_max") or 0.0 for d in devices.values()), default=0.0)
    needed = float(expectation.needs_window_s or 0.0)
    if idle >= needed:
        return {
            "outcome": "missed",
            "rank": None,
            "detail": f"idle {idle:.0f} s >= {needed:.0f} s and still not found",
        }
    return {
        "outcome": "inputs_only",
        "rank": None,
        "inputs_ok": idle > 0 and held >= IDLE_MEMORY_BYTES,
        "detail": f"idle window {idle:.0f} s of the rule's {needed:.0f} s, "
        f"{held / GIB:.2f} GiB held (needs >= {IDLE_MEMORY_BYTES / GIB:.0f} GiB)",
    }


def anatomy_check(expectation: Expectation, diag: dict[str, Any]) -> dict[str, Any]:
    """The step anatomy and MFU of one workload's analysis: the phases sum to the step
    (PHASE_SUM_ERROR_MAX), and the MFU within the workload's bounds where it has them."""
    run = (diag.get("analysis") or {}).get("run") or {}
    anatomy, compute = run.get("anatomy") or {}, run.get("compute") or {}
    if not anatomy:
        return {"ok": False, "detail": "no step anatomy in the analysis"}
    error = float(anatomy.get("sum_error") or 0.0)
    mfu = compute.get("mfu")
    problems = []
    if error > PHASE_SUM_ERROR_MAX:
        problems.append(f"phases sum to the step within {error:.1%} > {PHASE_SUM_ERROR_MAX:.0%}")
    bounded = expectation.mfu_min is not None or expectation.mfu_max is not None
    if bounded and mfu is None:
        problems.append(f"no MFU: {compute.get('reason') or 'not in the analysis'}")
    elif mfu is not None and expectation.mfu_min is not None and mfu < expectation.mfu_min:
        problems.append(f"MFU {mfu:.1%} < {expectation.mfu_min:.0%}")
    elif mfu is not None and expectation.mfu_max is not None and mfu > expectation.mfu_max:
        problems.append(f"MFU {mfu:.1%} > {expectation.mfu_max:.0%}")
    return {
        "ok": not problems,
        "sum_error": error,
        "largest": anatomy.get("largest"),
        "shares": anatomy.get("shares"),
        "mfu": mfu,
        "peak_source": compute.get("peak_source"),
        "detail": "; ".join(problems),
    }


def build_report(raw: dict[str, Any]) -> dict[str, Any]:
    """The report: the raw stage results plus each workload's outcome and a summary."""
    report = {**raw, "schema": SCHEMA}
    workloads = {}
    for name, diag in (raw.get("workloads") or {}).items():
        expectation = BY_WORKLOAD.get(name)
        if expectation is None:
            workloads[name] = diag
            continue
        workloads[name] = {**diag, "expected": outcome(expectation, diag)}
        if (diag.get("analysis") or {}).get("status") == "ok":
            workloads[name]["anatomy_check"] = anatomy_check(expectation, diag)
    report["workloads"] = workloads
    report["summary"] = summary(workloads, raw)
    return report


def summary(workloads: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    """Counts of outcomes, NVML checks that passed, A/B verdicts, the headline overheads."""
    counts = dict.fromkeys(OUTCOMES, 0)
    failed = []
    for name, diag in workloads.items():
        if "expected" in diag:
            counts[diag["expected"]["outcome"]] += 1
        if diag.get("status") == "failed":
            failed.append(name)
    nvml = [d.get("nvml") or {} for d in workloads.values() if d.get("status") != "skipped"]
    checks = [d["anatomy_check"] for d in workloads.values() if "anatomy_check" in d]
    modes = (raw.get("overhead") or {}).get("modes") or {}
    return {
        "outcomes": counts,
        "workloads_failed": failed,
        "nvml_ok": sum(1 for n in nvml if n.get("present") and n.get("ok")),
        "nvml_checked": len(nvml),
        "overhead_pct": {m: r.get("overhead_pct") for m, r in modes.items() if "overhead_pct" in r},
        "anatomy_ok": sum(bool(check.get("ok")) for check in checks),
        "anatomy_checked": len(checks),
        "ab": {a.get("knob"): a.get("verdict") for a in raw.get("ab") or []},
    }


# ---------------------------------------------------------------------------------- parsing
_REQUIRED = {"schema": str, "kit": dict, "probe": dict, "workloads": dict, "summary": dict}


def validate_report(report: Any) -> list[str]:
    """What is wrong with a report's shape (an empty list: well-formed)."""
    if not isinstance(report, dict):
        return ["the report is not a JSON object"]
    problems = [
        f"{key}: missing or not {kind.__name__}"
        for key, kind in _REQUIRED.items()
        if not isinstance(report.get(key), kind)
    ]
    if report.get("schema") not in (None, SCHEMA) and isinstance(report.get("schema"), str):
        problems.append(f"schema: {report['schema']!r}, expected {SCHEMA!r}")
    for name, diag in (report.get("workloads") or {}).items():
        if not isinstance(diag, dict):
            problems.append(f"workloads.{name}: not an object")
            continue
        if diag.get("status") not in ("ok", "failed", "skipped"):
            problems.append(f"workloads.{name}.status: {diag.get('status')!r}")
        expected = diag.get("expected")
        if name in BY_WORKLOAD and not (
            isinstance(expected, dict) and expected.get("outcome") in OUTCOMES
        ):
            problems.append(f"workloads.{name}.expected.outcome: missing or unknown")
    for i, row in enumerate(report.get("ab") or []):
        if not isinstance(row, dict) or row.get("status") not in ("ok", "failed", "skipped"):
            problems.append(f"ab[{i}]: not a stage result")
        elif row["status"] == "ok" and not isinstance(row.get("speedup"), (int, float)):
            problems.append(f"ab[{i}].speedup: not a number")
    return problems


def load_report(path: Path) -> dict[str, Any]:
    """Read a written report; ValueError naming the first problems when it is malformed."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not a readable JSON report ({error})") from None
    problems = validate_report(report)
    if problems:
        raise ValueError(f"{path}: malformed report: {'; '.join(problems[:3])}")
    return report
