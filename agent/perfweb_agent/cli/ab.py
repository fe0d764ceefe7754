"""What the `perf-agent ab` and `perf-agent runner` subcommands do.

Their arguments are in perfweb_agent.cli.ab_args, which `perf-agent`'s parser reads; this
module, with the A/B engine it imports, is loaded only when one of them runs. Also runnable
alone: `python -m perfweb_agent.cli.ab ab --knob num_workers=4 -- python train.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from perfweb_agent.ab.engine import AbError, AbPlan, Arm, run_ab
from perfweb_agent.cli.ab_args import register
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
            agreement_top1=_given(args.agreement_top1, AGREEMENT_TOP1_MIN),
            agreement_rtol=_given(args.agreement_rtol, AGREEMENT_RTOL),
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


def _given(value: float | None, default: float) -> float:
    return default if value is None else value


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
