"""Two traces' tables side by side (like HTA's TraceDiff): what was added, removed, got
slower or faster, per profiler step, and each change's share of the whole difference.

Per step, because two profiler windows rarely hold the same number of steps. Operators are
compared on host self time (what the CPU spent in the op itself) and device self time (the
GPU time of what it launched), kernels on total time; a change smaller than
`NOISE_US` per step or `NOISE_SHARE` of the row's own time is "same".
"""

from __future__ import annotations

from typing import Any

NOISE_US = 1.0  # µs per step
NOISE_SHARE = 0.05  # of the larger of the two times
TOP_CHANGES = 25


def _per_step(tables: dict[str, Any]) -> float:
    return float(max(int(tables.get("steps") or 0), 1))


def _verdict(a: float, b: float, *, in_a: bool, in_b: bool) -> str:
    if in_b and not in_a:
        return "added"
    if in_a and not in_b:
        return "removed"
    delta = b - a
    if abs(delta) < NOISE_US or abs(delta) < NOISE_SHARE * max(a, b):
        return "same"
    return "slower" if delta > 0 else "faster"


def diff_rows(
    *, a_rows: list[dict[str, Any]], b_rows: list[dict[str, Any]], key: str,
    a_steps: float, b_steps: float, count_key: str,
) -> list[dict[str, Any]]:  # fmt: skip
    """Rows of both tables joined by name: µs per step in A and B, the change, its verdict
    and `share` (its part of the sum of absolute changes), largest change first."""
    a_by = {row["name"]: row for row in a_rows}
    b_by = {row["name"]: row for row in b_rows}
    rows = []
    for name in sorted(a_by.keys() | b_by.keys()):
        a_us = a_by[name][key] / a_steps if name in a_by else 0.0
        b_us = b_by[name][key] / b_steps if name in b_by else 0.0
        rows.append(
            {
                "name": name,
                "a_us": round(a_us, 3),
                "b_us": round(b_us, 3),
                "delta_us": round(b_us - a_us, 3),
                "a_count": round(a_by[name][count_key] / a_steps, 2) if name in a_by else 0.0,
                "b_count": round(b_by[name][count_key] / b_steps, 2) if name in b_by else 0.0,
                "change": _verdict(a_us, b_us, in_a=name in a_by, in_b=name in b_by),
            }
        )
    moved = sum(abs(row["delta_us"]) for row in rows)
    for row in rows:
        row["share"] = round(abs(row["delta_us"]) / moved, 4) if moved else 0.0
    return sorted(rows, key=lambda r: (-abs(r["delta_us"]), r["name"]))


# (the diff's table, the trace table it reads, the time it compares, the count beside it)
_COMPARED = (
    ("operators", "operators", "host_self_us", "calls"),
    ("device_operators", "operators", "device_self_us", "calls"),
    ("kernels", "kernels", "total_us", "count"),
)


def trace_diff(a: dict[str, Any], b: dict[str, Any], *, top: int = TOP_CHANGES) -> dict[str, Any]:
    """A's and B's `trace_tables` compared: `{"operators": [...], "kernels": [...],
    "counts": {table: {verdict: n}}}`; each table keeps its `top` largest changes that are
    not "same"."""
    a_steps, b_steps = _per_step(a), _per_step(b)
    tables = {
        name: diff_rows(
            a_rows=a.get(source, []),
            b_rows=b.get(source, []),
            key=key,
            a_steps=a_steps,
            b_steps=b_steps,
            count_key=count_key,
        )
        for name, source, key, count_key in _COMPARED
    }
    counts = {
        name: {
            verdict: sum(1 for r in rows if r["change"] == verdict)
            for verdict in ("added", "removed", "slower", "faster", "same")
        }
        for name, rows in tables.items()
    }
    result: dict[str, Any] = {
        name: [r for r in rows if r["change"] != "same"][:top] for name, rows in tables.items()
    }
    result["counts"] = counts
    return result
