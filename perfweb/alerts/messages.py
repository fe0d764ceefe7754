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
    run = message.get("run") or {}
    if run.get("host"):
        lines.append(f"Host: {run['host']}")
    url = (run or {}).get("url") or (message.get("alert") or {}).get("url")
    if url:
        lines.append(f"Open: {url}")
    return [line for line in lines if line]
