"""Numbers with their units, the way people read them (shared by the panel and the brief
that alerts quote)."""

from __future__ import annotations

from typing import Any

from perfweb_recommender import units


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
    """A number with its unit, the way people read it (perfweb_recommender.units, the one
    formatter the CLI's report uses too)."""
    return units.format_value(value, unit)
