"""One profiler window's segments merged into one Kineto trace, streamed into a gzip file.

A window is recorded as a few short Kineto traces, its segments
(perfweb_agent.runtime.profiler), so that no single stop of the profiler holds the training
thread for long. Each segment is exported
to a JSON file of its own; `merge_segments` reads them one event at a time (never a whole
document as Python objects) and writes one trace:

- the first segment's header (schema, device properties, distributed info, base time);
- every segment's events, process and thread metadata once, the trace's first
  "Iteration Start" and its last "Record Window End";
- each later segment's timestamps moved earlier by the time the profiler itself took
  between segments (its stop and restart, while none of the script ran on the profiled
  thread), so that the timeline has no idle gaps that the script never had. The field
  `perfweb.segments` of the trace says how many segments there were and what was moved.

The agent runs it as a helper process (`merge_in_helper`: `python -I -S` this file, so no
agent starts in it): Python work on an agent thread takes the GIL from the training thread
in 5 ms slices, and a merge of 16k events done that way slowed a Python-heavy loop's steps
4.7x for the 1.9 s it took (and single steps up to 160 ms). In a process of its own it only
costs a core for a moment, and at a lower priority (HELPER_NICENESS) than the job's own
threads, which a host with no core to spare runs first. Only the standard library is
imported here.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

WRITE_CHUNK_CHARS = 1024 * 1024
HELPER_TIMEOUT_S = 300.0
HELPER_NICENESS = 10  # added to the helper's nice value: the job's threads come first
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_FIRST_ONLY = "Iteration Start"  # instant events that mark a trace's ends: one of each
_LAST_ONLY = "Record Window End"


class TraceTooLarge(Exception):
    """The merged JSON passed the size it may have; nothing was kept."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One exported segment: its JSON file and how far its timestamps move earlier."""

    path: str
    shift_us: float


def _skip(text: str, pos: int) -> int:
    match = _WHITESPACE.match(text, pos)
    return match.end() if match else pos


def _expect(text: str, pos: int, char: str) -> int:
    if pos >= len(text) or text[pos] != char:
        raise ValueError(f"not a Kineto trace: {char!r} expected at {pos}")
    return _skip(text, pos + 1)


def trace_events(text: str, header: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events of one Kineto JSON document, one at a time.

    The document's other top-level fields are put into `header` as they are read: those
    before `traceEvents` are there by the time the first event is yielded.
    """
    pos = _expect(text, _skip(text, 0), "{")
    while pos < len(text) and text[pos] != "}":
        key, pos = _DECODER.raw_decode(text, pos)
        pos = _expect(text, _skip(text, pos), ":")
        if key == "traceEvents":
            pos = _expect(text, pos, "[")
            while pos < len(text) and text[pos] != "]":
                event, pos = _DECODER.raw_decode(text, pos)
                if isinstance(event, dict):
                    yield event
                pos = _skip(text, pos)
                if pos < len(text) and text[pos] == ",":
                    pos = _skip(text, pos + 1)
            pos = _expect(text, pos, "]")
        else:
            header[key], pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos = _skip(text, pos + 1)


class _Writer:
    """Buffered text into a gzip stream, counting the JSON characters written."""

    def __init__(self, stream: TextIO, limit: int) -> None:
        self.stream = stream
        self.limit = limit
        self.written = 0
        self._parts: list[str] = []
        self._buffered = 0

    def write(self, text: str) -> None:
        self._parts.append(text)
        self._buffered += len(text)
        if self._buffered >= WRITE_CHUNK_CHARS:
            self.flush()

    def flush(self) -> None:
        self.written += self._buffered
        if self.written > self.limit:
            raise TraceTooLarge(f"over {self.limit} bytes of JSON")
        self.stream.write("".join(self._parts))
        self._parts, self._buffered = [], 0


def _keep(event: dict[str, Any], index: int, last: int, seen: set[str]) -> bool:
    """False for duplicates of metadata a trace needs once."""
    phase = event.get("ph")
    if phase == "M":
        key = json.dumps(event, sort_keys=True)
        if key in seen:
            return False
        seen.add(key)
        return True
    if phase == "i":
        name = str(event.get("name", ""))
        if name.startswith(_FIRST_ONLY):
            return index == 0
        if name.startswith(_LAST_ONLY):
            return index == last
    return True


def _shifted(event: dict[str, Any], shift_us: float) -> dict[str, Any]:
    ts = event.get("ts")
    if shift_us and isinstance(ts, (int, float)) and not isinstance(ts, bool):
        event["ts"] = round(ts - shift_us, 3)
    return event


def merge_segments(segments: list[Segment], target: str, *, max_json_bytes: int, name: str) -> int:
    """Write the segments as one gzip Kineto trace at `target`; the JSON size in bytes.

    Raises TraceTooLarge (after writing at most about `max_json_bytes`) when the trace is
    bigger than that, and ValueError when a segment is not a Kineto document.
    """
    seen: set[str] = set()
    base_ns: int | None = None
    last = len(segments) - 1
    with gzip.open(target, "wt", encoding="ascii", compresslevel=6) as stream:
        out = _Writer(stream, max_json_bytes)
        first_event = True
        for index, segment in enumerate(segments):
            with open(segment.path, encoding="utf-8") as handle:
                text = handle.read()
            header: dict[str, Any] = {}
            events = trace_events(text, header)
            event = next(events, None)
            shift_us = segment.shift_us
            segment_base = header.get("baseTimeNanoseconds")
            if index == 0:
                base_ns = segment_base if isinstance(segment_base, int) else None
                _write_header(out, header, segments, name)
            elif isinstance(segment_base, int) and base_ns is not None:
                shift_us -= (segment_base - base_ns) / 1000.0  # another base: same clock
            while event is not None:
                if _keep(event, index, last, seen):
                    out.write(
                        ("" if first_event else ",\n") + json.dumps(_shifted(event, shift_us))
                    )
                    first_event = False
                event = next(events, None)
            del text
        out.write("\n]}\n")
        out.flush()
    return out.written


def _write_header(out: _Writer, header: dict[str, Any], segments: list[Segment], name: str) -> None:
    fields = {k: v for k, v in header.items() if k != "traceName"}
    fields["traceName"] = name
    fields["perfweb"] = {
        "segments": len(segments),
        "moved_earlier_us": [round(s.shift_us, 3) for s in segments],
        "why": "the window was recorded in segments; the profiler's own time between "
        "them is taken out of the timeline",
    }
    out.write("{" + json.dumps(fields)[1:-1] + ', "traceEvents": [\n')


def merge_in_helper(
    segments: list[Segment],
    target: str,
    *,
    max_json_bytes: int,
    name: str,
    timeout_s: float = HELPER_TIMEOUT_S,
) -> int:
    """`merge_segments` in a helper process (the same interpreter, isolated, no site).

    Falls back to merging here when no helper can be started (an embedded interpreter).
    Raises TraceTooLarge or RuntimeError (the helper failed, with its last words).
    """
    command = [
        sys.executable,
        "-I",
        "-S",
        os.path.abspath(__file__),
        "--out",
        target,
        "--max-json-bytes",
        str(max_json_bytes),
        "--name",
        name,
    ]
    for segment in segments:
        command += ["--segment", f"{segment.shift_us!r}:{segment.path}"]
    env = {"PATH": os.environ.get("PATH", ""), "PERF_AGENT_DISABLE": "1"}
    try:
        done = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except OSError:
        return merge_segments(segments, target, max_json_bytes=max_json_bytes, name=name)
    if done.returncode == TOO_LARGE_EXIT:
        raise TraceTooLarge(done.stdout.strip())
    if done.returncode != 0:
        raise RuntimeError(f"trace merge failed: {done.stderr.strip()[-300:]}")
    return int(json.loads(done.stdout)["json_bytes"])


TOO_LARGE_EXIT = 3


def _niceness() -> int | None:
    try:
        return os.nice(0)
    except (AttributeError, OSError):
        return None


def main(argv: list[str] | None = None) -> int:
    """The helper: merge `--segment SHIFT_US:PATH`... into `--out`; prints the JSON size."""
    with contextlib.suppress(AttributeError, OSError):  # no os.nice on Windows
        os.nice(HELPER_NICENESS)
    parser = argparse.ArgumentParser(description="merge a profiler window's segments")
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-json-bytes", type=int, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--segment", action="append", default=[])
    args = parser.parse_args(argv)
    segments = []
    for value in args.segment:
        shift, _, path = value.partition(":")
        segments.append(Segment(path, float(shift)))
    try:
        written = merge_segments(
            segments, args.out, max_json_bytes=args.max_json_bytes, name=args.name
        )
    except TraceTooLarge as exc:
        print(exc)
        return TOO_LARGE_EXIT
    print(json.dumps({"json_bytes": written, "niceness": _niceness()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
