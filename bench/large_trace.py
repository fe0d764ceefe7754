"""Make a large Kineto trace by repeating a real one end to end (a bench helper).

    python bench/large_trace.py SOURCE.json[.gz] OUT.json[.gz] --gb 4

Each copy of the source's events is shifted in time by the source's span (plus a gap) and
its ids (correlation, External id, flow ids, Python ids) by the largest id + 1, so copy k is
a later, separate stretch of the same work: the analyses see k times the steps and kernels.
The document's other keys (deviceProperties, distributedInfo, ...) are kept once. The text
is rewritten as bytes (numbers found by one regular expression), so a 4 GB file takes about
a minute here; an OUT ending in .gz is gzipped (level 1).
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from pathlib import Path
from typing import BinaryIO

import orjson

_ARRAY_KEY = b'"traceEvents"'
_NUMBER = re.compile(rb'"(ts|id|correlation|External id|Python id|Python parent id)": ?(\d+)')
_GAP_US = 1000  # between copies


def _read(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _split(data: bytes) -> tuple[bytes, bytes, bytes]:
    """(head up to and including `[`, the events' text, `]` and the rest)."""
    key = data.index(_ARRAY_KEY)
    start = data.index(b"[", key) + 1
    end = data.rindex(b"]")
    return data[:start], data[start:end].strip().rstrip(b","), data[end:]


def _shifts(events_text: bytes) -> tuple[int, int]:
    """(time shift per copy in µs, id shift per copy)."""
    events = orjson.loads(b"[" + events_text + b"]")
    starts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))]
    ids = [int(m.group(2)) for m in _NUMBER.finditer(events_text) if m.group(1) != b"ts"]
    return int(max(ends) - min(starts)) + _GAP_US, max(ids, default=0) + 1


def _copy(events_text: bytes, parts: list[bytes], k: int, dt: int, did: int) -> bytes:
    """The events of copy k: the literal pieces joined with the shifted numbers."""
    if k == 0:
        return events_text
    out: list[bytes] = []
    for i in range(0, len(parts) - 1, 3):
        out.append(parts[i])
        key, value = parts[i + 1], int(parts[i + 2])
        value += dt * k if key == b"ts" else did * k
        out.append(b'"%s": %d' % (key, value))
    out.append(parts[-1])
    return b"".join(out)


def write_large_trace(source: Path, out: Path, *, gigabytes: float) -> int:
    """Write OUT, about `gigabytes` GB of uncompressed JSON; returns the copies written."""
    head, events_text, tail = _split(_read(source))
    dt, did = _shifts(events_text)
    parts = _NUMBER.split(events_text)  # literal, key, digits, literal, key, digits, ...
    copies = max(1, round(gigabytes * 1e9 / (len(events_text) + 2)))
    opener = gzip.open if out.name.endswith(".gz") else open
    handle: BinaryIO
    with opener(out, "wb", **({"compresslevel": 1} if opener is gzip.open else {})) as handle:  # type: ignore[operator]
        handle.write(head + b"\n")
        for k in range(copies):
            if k:
                handle.write(b",\n")
            handle.write(_copy(events_text, parts, k, dt, did))
        handle.write(b"\n" + tail)
    return copies


def main() -> None:
    """Write the file and say how many copies it holds."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--gb", type=float, default=2.0, help="uncompressed size, GB")
    args = parser.parse_args()
    copies = write_large_trace(args.source, args.out, gigabytes=args.gb)
    print(f"{args.out}: {copies} copies, {args.out.stat().st_size / 1e9:.2f} GB", file=sys.stderr)


if __name__ == "__main__":
    main()
