"""A run as the dashboard's templates show it: the read API's JSON shape (docs/protocol.md),
so that a server-rendered row and one the browser re-renders from /api/v1/runs agree, plus
`command_line` for display."""

from __future__ import annotations

import shlex
from typing import Any


def command_line(command: Any) -> str:
    if isinstance(command, list | tuple):
        return shlex.join(str(part) for part in command)
    return str(command or "")


def run_row(*, run: Any, detail: bool = False) -> dict[str, Any]:
    from perfweb.runs import selectors  # TEMP: until the read API's serializer lands

    row = dict(selectors.run_detail(run=run) if detail else selectors.run_summary(run=run))
    row["command_line"] = command_line(row.get("command"))
    return row
