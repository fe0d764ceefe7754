"""The profiler traces panel on the run page: each stored window with its download and an
"Open in Perfetto" button, and the tables of the TensorBoard profiler plugin (top operators,
top kernels, step-time breakdown) from the analysis stored with the diagnosis."""

from __future__ import annotations

from typing import Any

from perfweb.diagnostics import selectors
from perfweb.diagnostics.formatting import pct
from perfweb.diagnostics.models import Trace
from perfweb.pages.panels import Panel
from perfweb.runs.models import Run
from perfweb_contract.protocol import WindowName
from perfweb_recommender.coverage import workload_kind

TABLE_ROWS = 10
BREAKDOWN = (
    ("kernel", "GPU kernel"),
    ("memcpy", "Memcpy"),
    ("memset", "Memset"),
    ("runtime", "CUDA runtime"),
    ("dataloader", "DataLoader"),
    ("cpu_exec", "CPU execution"),
    ("other", "Other"),
)
DEVICE_CATEGORIES = ("kernel", "memcpy", "memset", "runtime")


def traces_panel(*, run: Run, user: Any) -> Panel | None:
    """Shown when the run has at least one stored trace (newest first)."""
    traces = list(Trace.objects.filter(run=run).order_by("-created_at", "-id"))
    if not traces:
        return None
    return Panel(
        template="diagnostics/_traces.html",
        context={"traces": [trace_view(run=run, trace=t) for t in traces]},
    )


def trace_view(*, run: Run, trace: Trace) -> dict[str, Any]:
    tables = selectors.trace_tables_of(trace)
    summary = (trace.summary or {}).get("summary") or {}
    kind = workload_kind(facts=run.facts or {}, steps=run.step_count)
    return {
        "id": trace.id,
        "name": trace.name,
        "rank": trace.rank,
        "size": trace.size,
        "error": trace.analysis_error,
        "analysed": tables is not None or summary.get("degraded") is not None,
        "degraded": summary.get("degraded"),
        "download": selectors.trace_download_url(run=run, trace=trace),
        "filename": f"{run.run_id}-{trace.name}.pt.trace.json.gz",
        "tables": _tables_view(tables, summary, window=WindowName.parse(trace.name), kind=kind)
        if tables is not None
        else None,
    }


def _ms(us: float) -> str:
    return f"{us / 1000:,.3f}"


def _tables_view(
    tables: dict[str, Any], summary: dict[str, Any], *, window: WindowName | None, kind: str | None
) -> dict[str, Any]:
    operators = tables.get("operators", [])
    by_device = sorted(operators, key=lambda r: (-r["device_self_us"], r["name"]))
    kernels = tables.get("kernels", [])
    # ProfilerStep markers count training steps; an inference window has none, and the
    # agent's window name says how many requests it spanned.
    steps = tables.get("steps", 0) or (window.steps if window is not None else 0)
    unit = "request" if kind == "inference" else "step"
    return {
        "steps": steps,
        "window_text": f"over the window of {steps:,} {unit}{'' if steps == 1 else 's'}"
        if steps
        else "over the whole window",
        # a CPU run's trace has no device time: five columns of 0.000 say nothing
        "device_columns": any(
            r["device_self_us"] > 0 or r["device_total_us"] > 0 for r in operators
        ),
        "host_ops": [_op_row(r) for r in operators[:TABLE_ROWS]],
        "device_ops": [_op_row(r) for r in by_device[:TABLE_ROWS] if r["device_self_us"] > 0],
        "kernels": [_kernel_row(r) for r in kernels[:TABLE_ROWS]],
        "operators_total": tables.get("operators_total", 0),
        "kernels_total": tables.get("kernels_total", 0),
        "tensor_core_share": pct(tables.get("tensor_core_share")),
        "breakdown": _breakdown(summary),
        "breakdown_steps": len(_steady(summary)),
        "first_excluded": len(summary.get("steps") or []) >= 3,
    }


def _op_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": row["name"],
        "calls": row["calls"],
        "host_self": _ms(row["host_self_us"]),
        "host_total": _ms(row["host_total_us"]),
        "device_self": _ms(row["device_self_us"]),
        "device_total": _ms(row["device_total_us"]),
    }


def _kernel_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": row["name"],
        "count": row["count"],
        "total": _ms(row["total_us"]),
        "mean": f"{row['mean_us']:,.1f}",
        "share": pct(row["share"]),
        "tensor_cores": row["tensor_cores"],
    }


def _steady(summary: dict[str, Any]) -> list[dict[str, Any]]:
    steps = summary.get("steps") or []
    return steps[1:] if len(steps) >= 3 else steps


def _breakdown(summary: dict[str, Any]) -> list[dict[str, str]]:
    """Mean per steady step of each category (the plugin's step-time breakdown)."""
    steady = _steady(summary)
    total = sum(s["duration_us"] for s in steady)
    if not steady or total <= 0:
        return []
    rows = []
    spent_by_key = {key: sum(s.get(f"{key}_us", 0.0) for s in steady) for key, _ in BREAKDOWN}
    no_device = not any(spent_by_key[key] for key in DEVICE_CATEGORIES)
    for key, label in BREAKDOWN:
        if no_device and key in DEVICE_CATEGORIES:
            continue  # a CPU run: rows of 0.000 device time say nothing
        spent = spent_by_key[key]
        rows.append(
            {
                "key": key,
                "label": label,
                "ms": _ms(spent / len(steady)),
                "share": pct(spent / total),
            }
        )
    rows.append({"key": "step", "label": "Step", "ms": _ms(total / len(steady)), "share": ""})
    return rows
