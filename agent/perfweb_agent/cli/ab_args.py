"""The arguments of `perf-agent ab` and `perf-agent runner`, and attach's `--knob` checks.

`perf-agent`'s parser (perfweb_agent.cli.main) is built from these on every command, so this
module imports no A/B engine: `perf-agent attach` reads it before it starts the script, and
what the launcher does first is on the wall time of every attached script
(bench/whole_process.py). What the two subcommands do is perfweb_agent.cli.ab's.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from perfweb_agent.ab import knobs
from perfweb_contract.knobs import KnobError, format_knobs, parse_knobs


def register(sub: Any) -> None:
    """Add `ab` and `runner` to the `perf-agent` subcommands."""
    ab = sub.add_parser("ab", help="measure a knob A/B on your own workload")
    ab.add_argument("--knob", action="append", default=[], metavar="K=V", required=True)
    ab.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds (default 5, at least 2)"
    )
    ab.add_argument("--steps", type=int, default=20, help="measured steps per arm (default 20)")
    ab.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="steps left out per arm at least; more until the step time settles (default 3)",
    )
    ab.add_argument(
        "--max-rounds",
        type=int,
        default=20,
        help="add rounds while the verdict is inconclusive, up to this many (20)",
    )
    ab.add_argument(
        "--time-budget",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="start no extra round that would end past this (default 1800)",
    )
    ab.add_argument(
        "--agreement-top1",
        type=float,
        default=None,  # perfweb_contract.ab.results.AGREEMENT_TOP1_MIN
        metavar="FRACTION",
        help="inference: least top-1 agreement of the outputs a faster fix keeps (0.99)",
    )
    ab.add_argument(
        "--agreement-rtol",
        type=float,
        default=None,  # perfweb_contract.ab.results.AGREEMENT_RTOL
        metavar="R",
        help="inference: largest output difference relative to the output's scale (1e-2)",
    )
    ab.add_argument("--format", choices=("text", "json"), default="text")
    ab.add_argument("--quiet", action="store_true", help="no per-round lines on stderr")
    ab.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")

    runner = sub.add_parser("runner", help="take optimisation jobs for this host")
    runner.add_argument("--server", help="perfweb URL (env PERF_AGENT_SERVER)")
    runner.add_argument("--token", help="project token (env PERF_AGENT_TOKEN)")
    runner.add_argument("--poll", type=float, default=5.0, help="seconds between polls")
    runner.add_argument("--once", action="store_true", help="exit after one job")


def add_attach_options(attach: argparse.ArgumentParser) -> None:
    """`--knob K=V` (repeatable) on `perf-agent attach`."""
    attach.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="K=V",
        help="apply a fix from the closed list (see docs/jobs.md)",
    )


def prepare_attach(args: argparse.Namespace, *, settings: Any, command: list[str]) -> int | None:
    """Check knobs and the step limit before the script starts; record the command.

    Returns 2 after one line on stderr when a knob or PERF_AGENT_MAX_STEPS is bad, else None.
    `--knob` options join PERF_AGENT_KNOBS (which the script's processes inherit).
    """
    try:
        settings_now = knobs.knobs_from_env()
        given = parse_knobs(list(getattr(args, "knob", None) or []))
        knobs.max_steps_from_env()
    except KnobError as error:
        sys.stderr.write(f"perf-agent attach: {error}\n")
        return 2
    merged = {**settings_now, **given}
    if merged:
        os.environ[knobs.ENV_KNOBS] = format_knobs(merged)
    if getattr(settings, "online", False):
        from perfweb_agent.ab import ledger  # online runs only

        ledger.safe_record(
            server=settings.server,
            token=settings.token,
            run_id=settings.run_id,
            command=list(command),
            cwd=os.getcwd(),
        )
    return None
