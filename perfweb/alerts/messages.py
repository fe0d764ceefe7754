"""The notification message: one JSON payload (docs/webhooks.md), rendered per channel.

The payload is built once, when the state change is stored, and kept on the event row, so a
retried delivery sends exactly what the first attempt sent.
"""

from __future__ import annotations

from typing import Any

VERSION = 1
EVENT_WORDS = {
    "firing": "FIRING",
    "resolved": "RESOLVED",
    "reminder": "STILL FIRING",
    "test": "TEST",
}


def headline(message: dict[str, Any]) -> str:
    word = EVENT_WORDS.get(message["event"], message["event"].upper())
    run = message.get("run") or {}
    rule = message.get("rule") or {}
    where = f" — run {run['name']}" if run.get("name") else ""
    what = rule.get("description", "perfweb alert")
    return f"[{word}] {what}{where} ({message['project']['name']})"


def text_lines(message: dict[str, Any]) -> list[str]:
    """The message as plain lines: headline, the numbers, why, the fix, the link."""
    lines = [headline(message), message.get("summary", "")]
    why = message.get("why")
    if why:
        gain = f" (estimated gain {why['gain_pct']:g}%)" if why.get("gain_pct") is not None else ""
        lines.append(f"Why: {why['title']}{gain}")
        if why.get("fix"):
            lines.append(f"Fix ({why['fix_id']}): {why['fix']}")
    waste = message.get("waste")
    if waste:
        lines.append(waste_line(waste))
    run = message.get("run") or {}
    if run.get("host"):
        lines.append(f"Host: {run['host']}")
    url = (run or {}).get("url") or (message.get("alert") or {}).get("url")
    if url:
        lines.append(f"Open: {url}")
    return [line for line in lines if line]


def waste_line(waste: dict[str, Any]) -> str:
    """`GPU-hours so far: 12.3 (4.1 low utilisation, 2.0 idle holding memory, 15.20 USD);
    dataloader.num_workers would have saved 3.1`."""
    hours = waste["gpu_hours"]
    money = ""
    if waste.get("wasted_cost") is not None:
        money = f", {waste['wasted_cost']:,.2f} {waste.get('currency', '')}".rstrip()
    line = (
        f"GPU-hours so far: {hours['total']:.2f} ({hours['low_utilization']:.2f} low "
        f"utilisation, {hours['idle_holding_memory']:.2f} idle holding memory{money})"
    )
    if waste.get("top_fix_id") and waste.get("recoverable_gpu_hours") is not None:
        line += f"; {waste['top_fix_id']} would have saved {waste['recoverable_gpu_hours']:.2f}"
    return line
