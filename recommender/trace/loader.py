"""Load Kineto (torch.profiler) JSON traces into compact `RankTrace` columns.

- Plain or gzipped JSON, one file or a directory of rank files.
- orjson parses the document; the events are walked once and only the columns the analyses
  need are kept (array.array while walking, numpy afterwards); the parsed document is dropped
  before the next file is read.
- Nanosecond traces write `"ts": 1712195495519689.047`. A float64 holds only ~0.25 µs at that
  magnitude, so before parsing we cut the common leading digits off every timestamp (a plain
  bytes replace of `"ts": 171219` by `"ts": `), which leaves values below 1e10 µs that float64
  holds to the nanosecond. Timestamps that did not share the prefix are still read and shifted.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

import orjson

from recommender.errors import InputError
from recommender.trace.events import EventSink
from recommender.trace.model import RankTrace

TRACE_SUFFIXES = (".json", ".json.gz")
_FRACTIONAL_TS = re.compile(rb'"ts":( ?)(\d{12,})\.\d')
_KEEP_DIGITS = 10  # digits kept after the cut: < 1e10 µs, float64-exact to ~1e-6 µs
_SNIFF_BYTES = 4 * 1024 * 1024
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it is gzip; InputError when unreadable or truncated."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as exc:
        raise InputError(f"{path}: damaged or truncated gzip ({exc})") from None


def _cut_timestamp_prefix(data: bytes) -> tuple[bytes, float, bool]:
    """Remove the shared leading digits of fractional timestamps; returns (data, base_us, cut)."""
    match = _FRACTIONAL_TS.search(data, 0, _SNIFF_BYTES)
    if match is None:
        return data, 0.0, False
    digits = match.group(2)
    prefix = digits[: len(digits) - _KEEP_DIGITS]
    base_us = float(int(prefix) * 10**_KEEP_DIGITS)
    data = data.replace(b'"ts": ' + prefix, b'"ts": ').replace(b'"ts":' + prefix, b'"ts":')
    return data, base_us, True


def _parse(data: bytes, path: Path) -> dict:
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc})") from None
    if isinstance(document, list):
        document = {"traceEvents": document}
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise InputError(f"{path}: not a Kineto trace (no traceEvents list)")
    return document


def _rank_of(document: dict, path: Path, fallback: int) -> int:
    info = document.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else fallback


def _compute_capability(document: dict) -> tuple[int, int] | None:
    props = document.get("deviceProperties")
    if not isinstance(props, list) or not props or not isinstance(props[0], dict):
        return None
    major, minor = props[0].get("computeMajor"), props[0].get("computeMinor")
    if isinstance(major, int) and isinstance(minor, int):
        return (major, minor)
    return None


def load_trace(path: str | Path, *, fallback_rank: int = 0) -> RankTrace:
    """Load one Kineto trace file (plain or gzipped JSON) into a `RankTrace`."""
    path = Path(path)
    data, base_us, cut = _cut_timestamp_prefix(read_bytes(path))
    document = _parse(data, path)
    del data
    sink = EventSink(base_us=base_us, prefix_cut=cut)
    for event in document["traceEvents"]:
        if isinstance(event, dict):
            sink.add(event)
    info = (
        document.get("distributedInfo") if isinstance(document.get("distributedInfo"), dict) else {}
    )
    trace = sink.build(
        rank=_rank_of(document, path, fallback_rank),
        source=str(path),
        world_size=info.get("world_size") if isinstance(info.get("world_size"), int) else None,
        backend=info.get("backend") if isinstance(info.get("backend"), str) else None,
        compute_capability=_compute_capability(document),
    )
    del document
    return trace


def trace_files(directory: Path) -> list[Path]:
    """Trace files directly inside a directory, sorted by name."""
    return sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))


def load_traces(path: str | Path) -> list[RankTrace]:
    """Load a trace file or every trace file of a directory (one per rank), sorted by rank."""
    path = Path(path)
    if path.is_file():
        return [load_trace(path)]
    if not path.is_dir():
        raise InputError(f"{path}: no such file or directory")
    files = trace_files(path)
    if not files:
        raise InputError(f"{path}: no trace files (*.json, *.json.gz)")
    traces = [load_trace(f, fallback_rank=i) for i, f in enumerate(files)]
    return sorted(traces, key=lambda t: t.rank)
