"""Command line: `python -m perfweb_recommender analyze PATH [--format text|json]`.

Bad input (not JSON, not a trace, a truncated gzip, a missing path) prints one line on
stderr and exits with code 2; never a traceback (set PERFWEB_DEBUG=1 to see one for input
that trips an unexpected error).
"""

from __future__ import annotations

import argparse
import os
import sys

import orjson

from perfweb_recommender.api import analyze_path
from perfweb_recommender.errors import InputError
from perfweb_recommender.text_report import render_text

EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m perfweb_recommender", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    analyze = commands.add_parser(
        "analyze",
        help="analyse a trace file, a directory of rank traces or an offline agent directory",
    )
    analyze.add_argument("path")
    analyze.add_argument("--format", choices=("text", "json"), default="text")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        report = analyze_path(args.path)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError:
        print(f"error: {args.path}: not enough memory to analyse it", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - the promise is one line, never a traceback
        if os.environ.get("PERFWEB_DEBUG"):
            raise
        print(
            f"error: {args.path}: cannot analyse it ({type(exc).__name__}: {exc})", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    if args.format == "json":
        sys.stdout.buffer.write(
            orjson.dumps(report.as_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        )
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(report))
    return 0
