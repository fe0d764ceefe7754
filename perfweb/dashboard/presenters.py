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


def with_command_line(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "command_line": command_line(row.get("command"))}
