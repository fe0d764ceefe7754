"""Numbers with their units, the way people read them (shared by the panel and the brief
that alerts quote)."""

from __future__ import annotations

from typing import Any


def pct(fraction: float | None, *, digits: int = 1) -> str:
    """A fraction as a percentage ("54.0 %", "−2.0 %"); "—" for None."""
    if fraction is None:
        return "—"
    return f"{100 * fraction:.{digits}f} %".replace("-", "−")


def evidence_text(item: dict[str, Any]) -> str:
    """One evidence item in words: "num_workers: 0 workers (facts)"."""
    value = format_value(item.get("value"), str(item.get("unit", "")))
    return f"{item.get('label', '')}: {value} ({item.get('source', '')})"


def format_value(value: Any, unit: str) -> str:
    """A number with its unit, the way people read it (a fraction as a percentage)."""
    if isinstance(value, bool) or unit == "flag":
        return {True: "yes", False: "no"}.get(value, str(value))
    if not isinstance(value, int | float):
        return f"{value} {unit}".strip()
    if unit == "fraction":
        return f"{100 * value:.1f} %"
    if unit == "bytes":
        return _bytes(float(value))
    if unit == "s" and abs(value) < 1:
        return f"{1000 * value:.1f} ms"
    return f"{_number(value)} {unit}".strip()


def _number(value: int | float) -> str:
    if isinstance(value, int) or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _bytes(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.1f} {unit}" if unit != "B" else f"{value:.0f} B"
        value /= 1024
    return f"{value:.1f} TiB"
