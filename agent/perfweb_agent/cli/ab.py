"""The `perf-agent ab` and `perf-agent runner` subcommands, and the attach-time knob checks.

`agent/perfweb_agent/cli/main.py` registers them with `abcli.register(subparsers)` and
`verbs.update(abcli.VERBS)`,
and calls `abcli.prepare_attach(...)` in attach. Also runnable alone:
`python -m perfweb_agent.cli.ab ab --knob num_workers=4 -- python train.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from perfweb_agent.ab import knobs, ledger
from perfweb_agent.ab.engine import AbError, AbPlan, Arm, run_ab
from perfweb_contract.ab.decision import expected_round_sd, resolvable_effect, settle
from perfweb_contract.ab.presentation import (
    before_after_rows,
    changed_results_note,
    duration_text,
    warmup_sentence,
)
from perfweb_contract.ab.results import (
    AGREEMENT_RTOL,
    AGREEMENT_TOP1_MIN,
    INFERENCE,
    UNKNOWN_KIND,
    Comparison,
)
from perfweb_contract.knobs import KnobError, format_knobs, parse_knobs
from perfweb_contract.verdicts import VERDICT_LABELS


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
        default=AGREEMENT_TOP1_MIN,
        metavar="FRACTION",
        help="inference: least top-1 agreement of the outputs a faster fix keeps (0.99)",
    )
    ab.add_argument(
        "--agreement-rtol",
        type=float,
        default=AGREEMENT_RTOL,
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
        ledger.safe_record(
            server=settings.server,
            token=settings.token,
            run_id=settings.run_id,
            command=list(command),
            cwd=os.getcwd(),
        )
    return None


def ab_main(args: argparse.Namespace) -> int:
    """`perf-agent ab`: run the A/B and print the comparison."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        plan = AbPlan(
            command=command,
            knobs=parse_knobs(args.knob),
            rounds=args.rounds,
            steps=args.steps,
            warmup=args.warmup,
            max_rounds=max(args.rounds, args.max_rounds),
            time_budget_s=args.time_budget,
            agreement_top1=args.agreement_top1,
            agreement_rtol=args.agreement_rtol,
        )
    except (KnobError, AbError) as error:
        sys.stderr.write(f"perf-agent ab: {error}\n")
        return 2

    first_round: list[Arm] = []

    def report(arm: Arm) -> None:
        if args.quiet:
            return
        mean = arm.to_dict()["mean_s"]
        unit = "request" if arm.kind == INFERENCE else "step"
        sys.stderr.write(f"round {arm.round} {arm.arm:9s} {mean:.4f} s/{unit}\n")
        if arm.round == 1:
            first_round.append(arm)
            if len(first_round) == 2:
                sys.stderr.write(plan_sentence(plan, first_round) + "\n")

    if not args.quiet:
        sys.stderr.write(
            f"perf-agent ab: {plan.rounds} to {plan.max_rounds} rounds of 2 arms, "
            f"{plan.warmup}+ warm-up and {plan.steps} measured steps each; round 1 measures "
            "this host for the expected duration and the smallest effect it can resolve\n"
        )

    try:
        result = run_ab(plan, on_arm=report)
    except AbError as error:
        sys.stderr.write(f"perf-agent ab: {error}\n")
        return 1
    if args.format == "json":
        rows = before_after_rows(result)
        print(json.dumps({**result.to_dict(), "knobs": plan.knobs, "rows": rows}, indent=2))
    else:
        print(format_text(result, plan))
    return 0


def plan_sentence(plan: AbPlan, arms: list[Arm]) -> str:
    """What round 1 says of the whole job on this host: its expected and longest duration, and
    the smallest effect `plan.max_rounds` rounds can resolve at the step noise it measured."""
    round_s = sum(arm.wall_s for arm in arms)
    expected = plan.rounds * round_s
    longest = max(expected, min(plan.max_rounds * round_s, plan.time_budget_s + round_s))
    settled = [arm.step_s[settle(arm.step_s, minimum=plan.warmup)[0] :] for arm in arms]
    kind = arms[0].kind
    spread = max(expected_round_sd(step_s=s, steps=plan.steps, kind=kind) for s in settled)
    smallest = resolvable_effect(round_sd=spread, rounds=plan.max_rounds)
    return (
        f"expected   about {duration_text(expected)} for {plan.rounds} rounds "
        f"({duration_text(round_s)} a round), up to {duration_text(longest)}; the smallest "
        f"effect it can resolve on this host: {smallest:.0%} of step time"
    )


def format_text(result: Comparison, plan: AbPlan) -> str:
    """The comparison as a few plain lines and the before/after table."""
    unit = "requests" if result.kind == INFERENCE else "steps"
    verdict = VERDICT_LABELS.get(result.verdict, result.verdict)
    why = changed_results_note(result)
    kind = result.kind if result.kind != UNKNOWN_KIND else "kind not reported"
    lines = [
        f"knobs      {format_knobs(plan.knobs)}",
        f"workload   {kind}: {result.rounds} rounds x {result.steps_per_arm} {unit} per arm",
        f"speedup    {result.speedup:.2f}x (95% CI {result.ci_low:.2f}x - "
        f"{result.ci_high:.2f}x, {result.interval}; {result.statistic})",
        f"verdict    {verdict}" + (f": {why} (not verified)" if why else ""),
        f"stopped    {result.stop_reason}",
        f"warm-up    {warmup_sentence(result)}",
        "",
        *format_table(before_after_rows(result)),
    ]
    agreement = result.agreement
    if result.kind == INFERENCE and agreement.visible:
        lines.append(
            f"(outputs of the first {agreement.samples} requests compared, all rounds; "
            f"tolerance: top-1 >= {agreement.top1_min:.0%}, rel. diff <= {agreement.rel_max:.0e})"
        )
    return "\n".join(lines)


def format_table(rows: list[dict[str, Any]]) -> list[str]:
    """`abstats.before_after_rows` as aligned text lines, a header first."""
    table = [("", "before", "after", "change")]
    table += [(r["metric"], r["before"], r["after"], r["change"]) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(3)]
    cells = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=False)) for line in table]
    return [f"{left}  {line[3]}".rstrip() for left, line in zip(cells, table, strict=True)]


def runner_main(args: argparse.Namespace) -> int:
    """`perf-agent runner`: take and run jobs for this host."""
    from perfweb_agent.ab import runner

    server = args.server or os.environ.get("PERF_AGENT_SERVER")
    token = args.token or os.environ.get("PERF_AGENT_TOKEN")
    if not server or not token:
        sys.stderr.write("perf-agent runner: give --server and --token\n")
        return 2
    return runner.main(server, token, once=args.once, poll_s=args.poll)


VERBS = {"ab": ab_main, "runner": runner_main}


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (`python -m perfweb_agent.cli.ab ab|runner ...`)."""
    parser = argparse.ArgumentParser(prog="perf-agent")
    register(parser.add_subparsers(dest="verb", required=True))
    args = parser.parse_args(argv)
    return VERBS[args.verb](args)


if __name__ == "__main__":
    sys.exit(main())
