"""A run as the dashboard's templates show it: the read API's JSON shape (docs/protocol.md),
so that a server-rendered row and one the browser re-renders from /api/v1/runs agree, plus
`command_line` for display."""

from __future__ import annotations

import shlex
from typing import Any

from perfweb_recommender.anatomy import Anatomy
from perfweb_recommender.compute import Utilisation, rate


def command_line(command: Any) -> str:
    if isinstance(command, list | tuple):
        return shlex.join(str(part) for part in command)
    return str(command or "")


def with_command_line(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "command_line": command_line(row.get("command"))}


def anatomy_view(anatomy: Anatomy) -> dict[str, Any]:
    """The run header's step split: each phase's median and share, largest first (phases
    under 0.5% of the step left out), and the warm-up steps kept out of the medians."""
    shares = sorted(anatomy.shares.items(), key=lambda kv: -kv[1])
    return {
        "median_step_ms": anatomy.main.median_step_s * 1000,
        "steps": anatomy.main.steps,
        "phases": [
            {
                "phase": name,
                "label": name.replace("_", " "),
                "share": share,
                "ms": anatomy.phases[name] * 1000,
            }
            for name, share in shares
            if share >= 0.005
        ],
        "warmup": [w.text() for w in anatomy.warmup],
    }


def compute_view(use: Utilisation) -> dict[str, Any]:
    """The run header's MFU: the share, achieved and peak FLOP/s and where the peak comes
    from; or why it is not known."""
    if use.mfu is None or use.achieved_flops is None or use.peak_flops is None:
        return {"mfu": None, "reason": use.reason}
    return {
        "mfu": use.mfu,
        "mfu_text": f"{use.mfu:.1%}",
        "achieved": rate(use.achieved_flops),
        "peak": rate(use.peak_flops),
        "source": use.peak_source,
        "dtype": use.dtype,
    }
