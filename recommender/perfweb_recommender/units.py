"""Numbers with their units the way people read them: the one formatter behind the CLI's text
report and the dashboard's evidence (perfweb.diagnostics.formatting calls it).

A fraction reads as a percentage (`100.0 %`, never `1 fraction`); a duration in the unit that
keeps it short (`125.3 ms`, never `125,292 µs`); bytes in binary units; a count with its
thousands separated."""

from __future__ import annotations

from typing import Any

# seconds per unit, for the durations the rules report
_DURATION_UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def format_value(value: Any, unit: str) -> str:
    """`value` with `unit`: `54.0 %`, `125.3 ms`, `1.5 GiB`, `8,062 requests`, `yes`."""
    if isinstance(value, bool) or unit == "flag":
        return {True: "yes", False: "no"}.get(value, str(value))
    if not isinstance(value, int | float):
        return f"{value} {unit}".strip()
    if unit == "fraction":
        return f"{100 * value:.1f} %"
    if unit == "bytes":
        return _bytes(float(value))
    if unit in _DURATION_UNITS:
        return duration(float(value) * _DURATION_UNITS[unit])
    return f"{_number(value)} {unit}".strip()


def duration(seconds: float) -> str:
    """`850 ns`, `12.5 µs`, `125.3 ms`, `2.41 s`, `1,234 s`."""
    size = abs(seconds)
    if size == 0:
        return "0 s"
    if size < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if size < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if size < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.3g} s" if size < 1000 else f"{seconds:,.0f} s"


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
