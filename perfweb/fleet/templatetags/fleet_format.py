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
