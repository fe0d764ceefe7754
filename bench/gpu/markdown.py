"""The report as a readable Markdown summary (one table per part of the check)."""

from __future__ import annotations

from typing import Any

GIB = float(1 << 30)
MARK = {
    "found_first": "✅ found first", "found_lower": "⚠️ found lower", "missed": "❌ missed",
    "inputs_only": "⏳ inputs only", "clean": "✅ clean", "false_alarm": "❌ false alarm",
    "failed": "❌ workload failed", "not_analysed": "❌ not analysed", "skipped": "⏭ skipped",
}  # fmt: skip
CLASSIFICATION_WORKLOADS = ("fp32_matmul", "fp32_conv", "healthy_bf16", "launch_bound")


def _num(value: Any, digits: int = 1, scale: float = 1.0) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "–"
    return f"{value * scale:.{digits}f}"


def _spread(row: dict[str, Any] | None, digits: int = 3) -> str:
    if not row:
        return "–"
    return f"{row['median']:.{digits}f} ({row['min']:.{digits}f}–{row['max']:.{digits}f})"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table."""
    cells = [header, ["---"] * len(header), *rows]
    return [
        "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in r) + " |" for r in cells
    ]


def _heading(report: dict[str, Any]) -> list[str]:
    kit, probe = report.get("kit") or {}, report.get("probe") or {}
    rec = report.get("recommender") or {}
    outcomes = (report.get("summary") or {}).get("outcomes") or {}
    counted = {k: v for k, v in outcomes.items() if v}
    return [
        f"# Real-GPU check: {probe.get('gpu') or kit.get('device')} ({kit.get('started_at', '?')})",
        "",
        f"- machine: {probe.get('gpu') or 'no GPU'}, capability {probe.get('capability', '–')}, "
        f"driver {probe.get('nvml_driver', '–')}, torch {probe.get('torch', '–')}, "
        f"Python {probe.get('python', '–')}, {probe.get('cpu_count', '–')} CPUs; "
        f"GPM supported: {probe.get('gpm_supported', '–')}",
        f"- kit: device `{kit.get('device')}`{' (smoke)' if kit.get('smoke') else ''}, "
        f"{_num(kit.get('elapsed_s'), 0)} s of a {_num(kit.get('budget_s'), 0)} s budget; "
        f"recommender: {rec.get('reason', '–')}",
        f"- outcomes: {', '.join(f'{k} {v}' for k, v in counted.items()) or 'none'}",
        "",
    ]


def _planted(workloads: dict[str, Any]) -> list[str]:
    rows = []
    for name, diag in workloads.items():
        exp = diag.get("expected") or {}
        top = (diag.get("analysis") or {}).get("findings") or []
        first = f"{top[0]['id']} ({_num(top[0].get('score'), 3)})" if top else "–"
        rows.append(
            [
                name,
                exp.get("plant", "–"),
                f"`{exp.get('finding')}`",
                MARK.get(str(exp.get("outcome")), "?"),
                str(exp.get("rank") or "–"),
                first,
                diag.get("status", "?"),
                str(exp.get("detail") or diag.get("error") or ""),
            ]
        )
    return (
        ["## Planted causes", ""]
        + table(
            ["workload", "plant", "expected", "outcome", "rank", "top (score)", "run", "note"], rows
        )
        + [""]
    )


def _nvml(workloads: dict[str, Any]) -> list[str]:
    rows = []
    for name, diag in workloads.items():
        nvml = diag.get("nvml") or {}
        if not nvml.get("present"):
            rows.append([name, "–", "–", "–", "–", "–", "–", str(nvml.get("reason") or "–")])
            continue
        for key, dev in nvml.get("devices", {}).items():
            s = dev.get("series") or {}
            util, mem = s.get("gpu.utilization") or {}, s.get("gpu.memory_used") or {}
            failed = [
                c["name"] + ": " + c["detail"] for c in dev.get("checks", []) if c["ok"] is False
            ]
            rows.append(
                [
                    name,
                    key,
                    str(util.get("count", 0)),
                    "/".join(_num(util.get(k), 0) for k in ("min", "median", "max")),
                    _num(mem.get("max"), 1, 1 / GIB),
                    _num((s.get("gpu.power") or {}).get("max"), 0),
                    _num((s.get("gpu.sm_clock") or {}).get("median"), 0),
                    "; ".join(failed) or "all plausible",
                ]
            )
    return (
        ["## NVML series", ""]
        + table(
            [
                "workload",
                "device",
                "samples",
                "util % min/med/max",
                "mem used max GiB",
                "power max W",
                "SM clock med MHz",
                "checks",
            ],
            rows,
        )
        + [""]
    )


def _classification(workloads: dict[str, Any]) -> list[str]:
    rows = []
    for name, diag in workloads.items():
        for rank, tr in ((diag.get("analysis") or {}).get("ranks") or {}).items():
            t, tc = tr.get("temporal_breakdown") or {}, tr.get("tensor_cores") or {}
            memcpy = ", ".join(sorted((tr.get("memcpy") or {}).keys())) or "–"
            rows.append(
                [
                    f"{name} #{rank}",
                    _num(t.get("idle_pct")),
                    _num(t.get("compute_pct")),
                    _num(t.get("non_compute_pct")),
                    _num(tc.get("dense_math_share"), 2),
                    _num(tc.get("tensor_core_share"), 2),
                    _num(tc.get("fp32_simt_share"), 2),
                    _num((tr.get("launch") or {}).get("short_kernel_share"), 2),
                    memcpy,
                ]
            )
    lines = (
        ["## Trace classification (profiler window)", ""]
        + table(
            [
                "trace",
                "idle %",
                "compute %",
                "non-compute %",
                "dense math",
                "tensor core",
                "fp32 SIMT",
                "short kernels",
                "memcpy kinds",
            ],
            rows,
        )
        + [""]
    )
    for name in CLASSIFICATION_WORKLOADS:
        traces = ((workloads.get(name) or {}).get("kernels") or {}).get("traces") or {}
        for trace, kernels in list(traces.items())[:1]:
            lines.append(f"Heaviest kernels of `{name}` ({trace}):")
            lines.append("")
            for k in kernels[:4]:
                flags = [f for f in ("dense_math", "tensor_core", "fp32_simt") if k.get(f)]
                lines.append(
                    f"- {_num(k.get('us'), 0)} µs × {k.get('count')}: `{k['name'][:90]}` "
                    f"→ {', '.join(flags) or 'other'}"
                )
            lines.append("")
    return lines


def _overhead(report: dict[str, Any]) -> list[str]:
    over = report.get("overhead") or {}
    lines = ["## Agent overhead (healthy bf16 loop, interleaved)", ""]
    if over.get("status") != "ok":
        return lines + [f"{over.get('status', 'not run')}: {over.get('error', '')}", ""]
    rows = [
        [
            mode,
            str(r.get("runs")),
            _spread(r.get("step_ms")),
            _spread(r.get("ratio"), 4),
            f"{r['overhead_pct']:+.2f}%" if "overhead_pct" in r else "–",
        ]
        for mode, r in over.get("modes", {}).items()
    ]
    lines += table(
        ["mode", "runs", "median step ms (min–max)", "ratio to baseline (min–max)", "overhead"],
        rows,
    ) + [""]
    window = over.get("profiler_window")
    if window:
        lines.append(
            f"Profiler window (5 steps, export included): {_spread(window['extra_ms'], 1)} ms "
            f"extra in all; its steps {_spread(window['window_step_ms'])} ms vs "
            f"{_spread(window['typical_step_ms'])} ms outside it."
        )
    for error in over.get("errors") or []:
        lines.append(f"- {error}")
    return lines + [""]


def _ab(report: dict[str, Any]) -> list[str]:
    rows = []
    for row in report.get("ab") or []:
        if row.get("status") != "ok":
            rows.append(
                [
                    f"`{row.get('knob')}`",
                    row.get("workload", "–"),
                    row.get("status", "?"),
                    "–",
                    "–",
                    "–",
                    "–",
                    str(row.get("error", "")),
                ]
            )
            continue
        parity = row.get("loss_parity") or {}
        rows.append(
            [
                f"`{row['knob']}`",
                row["workload"],
                str(row.get("verdict")),
                f"{row['speedup']:.2f}×",
                f"{_num(row.get('ci_low'), 2)}–{_num(row.get('ci_high'), 2)}×",
                _num(row.get("baseline_step_s"), 2, 1e3),
                _num(row.get("candidate_step_s"), 2, 1e3),
                "within" if parity.get("within_tolerance") else str(parity.get("visible", "–")),
            ]
        )
    return (
        ["## A/B (`perf-agent ab`)", ""]
        + table(
            [
                "knob",
                "workload",
                "verdict",
                "speed-up",
                "95% CI",
                "baseline ms/step",
                "candidate ms/step",
                "loss parity",
            ],
            rows,
        )
        + [""]
    )


def render_markdown(report: dict[str, Any]) -> str:
    """The whole summary."""
    workloads = report.get("workloads") or {}
    parts = (
        _heading(report)
        + _planted(workloads)
        + _nvml(workloads)
        + _classification(workloads)
        + _overhead(report)
        + _ab(report)
    )
    return "\n".join(parts).rstrip() + "\n"
