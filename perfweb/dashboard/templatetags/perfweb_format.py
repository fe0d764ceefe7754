"""Template filters that format run numbers the same way the dashboard's JavaScript does
(static/dashboard/js/format.js), so a server-rendered row and a live-updated one look alike."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template

register = template.Library()


@register.filter
def unixtime(value: Any) -> dt.datetime | None:
    """Unix seconds (or a datetime) as an aware UTC datetime; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return dt.datetime.fromtimestamp(float(value), tz=dt.UTC)


@register.filter
def isotime(value: Any) -> str:
    moment = unixtime(value)
    return moment.isoformat() if moment else ""


@register.filter
def shorttime(value: Any) -> str:
    """ "2026-11-30 10:05 UTC" — the browser rewrites it to local time."""
    moment = unixtime(value)
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "—"


@register.filter
def duration(seconds: Any) -> str:
    """12.3 -> "12s", 125 -> "2m 05s", 3725 -> "1h 02m", 90000 -> "1d 01h"."""
    if seconds is None or seconds == "":
        return "—"
    total = max(0, int(float(seconds)))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


@register.filter
def percent(value: Any) -> str:
    if value is None or value == "":
        return "—"
    return f"{float(value):.0f}%"


@register.filter
def counted(value: Any, unit: str = "step") -> str:
    """8062, "request" -> "8,062 requests"; 1 -> "1 step"; none or 0 -> "—"."""
    if value in (None, "", 0):
        return "—"
    number = int(value)
    return f"{number:,} {unit}{'' if number == 1 else 's'}"


@register.filter
def factvalue(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
