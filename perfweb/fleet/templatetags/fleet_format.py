"""Number formats of the fleet page."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def hours(value: float | None) -> str:
    """GPU- or core-hours: `1,234 h`, `12.3 h`, `0.42 h`; an em dash for none."""
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:,.0f} h"
    return f"{value:.1f} h" if value >= 1 else f"{value:.2f} h"


@register.filter
def money(value: float | None, currency: str = "") -> str:
    if value is None:
        return "—"
    return f"{value:,.2f} {currency}".strip()


@register.filter
def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


@register.filter
def core_time(value: float | None) -> str:
    """CPU time in core-hours, or core-minutes below a tenth of one (a short CPU run's 0.004
    core-hours would print as `0.00 h`): `3.2 core-h`, `0.25 core-h`, `2.4 core-min`."""
    if value is None:
        return "—"
    if value >= 0.1:
        return f"{value:.1f} core-h" if value >= 1 else f"{value:.2f} core-h"
    return f"{value * 60:.1f} core-min"


@register.filter
def energy(value: float | None) -> str:
    """kWh from NVML's counter: `12.3 kWh`, `0.042 kWh`; an em dash for none."""
    if value is None:
        return "—"
    return f"{value:,.1f} kWh" if value >= 1 else f"{value:.3f} kWh"
