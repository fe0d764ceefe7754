"""The `perf-agent` command: attach, upload, doctor, ab, runner.

Each verb's module is imported when that verb runs, not before: `perf-agent attach` starts
the user's script after reading only its arguments and settings (perfweb_agent.cli.attach).
"""

from __future__ import annotations

import argparse
import os
import sys

from perfweb_agent.cli import ab_args
from perfweb_agent.core.config import load_settings
from perfweb_contract import protocol


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perf-agent", description=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True)

    attach = sub.add_parser("attach", help="run a command with the agent inside it")
    attach.add_argument("--server", help=f"perfweb URL (env {protocol.ENV_SERVER})")
    attach.add_argument("--token", help=f"project ingest token (env {protocol.ENV_TOKEN})")
    attach.add_argument("--offline", metavar="DIR", help="write to DIR instead of a server")
    attach.add_argument("--name", help="run name (default: the script's name)")
    attach.add_argument("--tag", action="append", default=[], metavar="K=V", help="repeatable")
    attach.add_argument("--interval", type=float, help="seconds between samples (default 1)")
    attach.add_argument("--no-profile", action="store_true", help="no profiler windows")
    attach.add_argument(
        "--http-timeout",
        type=float,
        metavar="S",
        help="seconds to wait for the server's answer (default 15; a slower server doubles "
        "it, up to 120; env PERF_AGENT_HTTP_TIMEOUT)",
    )
    ab_args.add_attach_options(attach)
    attach.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")

    upload = sub.add_parser("upload", help="send an offline or spill directory to a server")
    upload.add_argument("dir")
    upload.add_argument("--server")
    upload.add_argument("--token")
    upload.add_argument("--delete", action="store_true", help="remove files once stored")

    doctor = sub.add_parser(
        "doctor",
        help="what the agent would see on this machine; exit 1 if the server or token fails",
    )
    doctor.add_argument("--server")
    doctor.add_argument("--token")
    ab_args.register(sub)
    return parser


def _attach(args: argparse.Namespace) -> int:
    from perfweb_agent.cli.attach import run_attached

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        sys.stderr.write("perf-agent attach: give the command after --\n")
        return 2
    settings = load_settings(
        server=args.server,
        token=args.token,
        offline=args.offline,
        name=args.name,
        tags=args.tag or None,
        interval=args.interval,
        profile=False if args.no_profile else None,
        http_timeout=args.http_timeout if args.http_timeout and args.http_timeout > 0 else None,
    )
    if not settings.online and not settings.offline:
        sys.stderr.write("perf-agent attach: give --server and --token, or --offline DIR\n")
        return 2
    refused = ab_args.prepare_attach(args, settings=settings, command=command)
    if refused is not None:
        return refused
    if settings.offline:
        os.makedirs(settings.offline, exist_ok=True)
    return run_attached(settings, command)


def _upload(args: argparse.Namespace) -> int:
    from perfweb_agent.delivery.upload import upload

    settings = load_settings(server=args.server, token=args.token)
    if not settings.server:
        sys.stderr.write("perf-agent upload: give --server (or PERF_AGENT_SERVER)\n")
        return 2
    if not os.path.isdir(args.dir):
        sys.stderr.write(f"perf-agent upload: {args.dir} is not a directory\n")
        return 2
    report = upload(args.dir, server=settings.server, token=settings.token, delete=args.delete)
    print(
        f"uploaded {report.sent} request(s) from {report.agents} agent folder(s); "
        f"{report.duplicates} were already stored; {report.traces} trace(s)"
    )
    for line in report.failed:
        print(f"failed: {line}")
    return 1 if report.failed else 0


def _doctor(args: argparse.Namespace) -> int:
    from perfweb_agent.cli.doctor import doctor

    settings = load_settings(server=args.server, token=args.token)
    report = doctor(settings.server, settings.token)
    for line in report.lines:
        print(line)
    return 1 if report.server_failed else 0


def _ab(args: argparse.Namespace) -> int:
    from perfweb_agent.cli import ab

    return ab.ab_main(args)


def _runner(args: argparse.Namespace) -> int:
    from perfweb_agent.cli import ab

    return ab.runner_main(args)


VERBS = {"attach": _attach, "upload": _upload, "doctor": _doctor, "ab": _ab, "runner": _runner}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `perf-agent` console script."""
    args = _parser().parse_args(argv)
    return VERBS[args.verb](args)


if __name__ == "__main__":
    sys.exit(main())
