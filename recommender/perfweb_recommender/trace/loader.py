"""Load Kineto (torch.profiler) JSON traces into compact `RankTrace` columns.

- Plain or gzipped JSON, one file or a directory of rank files.
- msgspec decodes the events into small typed structs (fields we never read are skipped);
  a document that does not fit that schema goes through orjson instead. The events are
  walked once and only the columns the analyses need are kept (array.array while walking,
  numpy afterwards); the parsed document is dropped before the next file is read.
- Nanosecond traces write `"ts": 1712195495519689.047`. A float64 holds only ~0.25 µs at that
  magnitude, so before parsing we cut the common leading digits off every timestamp (a plain
  bytes replace of `"ts": 171219` by `"ts": `), which leaves values below 1e10 µs that float64
  holds to the nanosecond. Timestamps that did not share the prefix are still read and shifted.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import orjson

from perfweb_contract.protocol import WindowName
from perfweb_recommender.errors import InputError
from perfweb_recommender.trace.budget import memory_budget_mb as memory_budget_mb_setting
from perfweb_recommender.trace.build import build_rank_trace
from perfweb_recommender.trace.events import EventSink
from perfweb_recommender.trace.model import RankTrace
from perfweb_recommender.trace.schema import (
    DOCUMENT_DECODER,
    EVENT_DECODER,
    EVENTS_DECODER,
    TYPED_EVENTS_DECODER,
)
from perfweb_recommender.trace.stream import EventStream, NotStreamable, check_format

__all__ = ["check_format", "load_trace", "load_trace_in_memory", "load_traces", "read_bytes"]

TRACE_SUFFIXES = (".json", ".json.gz")
_FRACTIONAL_TS = re.compile(rb'"ts":( ?)(\d{12,})\.\d')
_KEEP_DIGITS = 10  # digits kept after the cut, behind a 1: [1e10, 2e10) µs, exact to 2e-6 µs
_SNIFF_BYTES = 4 * 1024 * 1024
_READ_CHUNK = 256 * 1024  # compressed bytes per inflate call
_REPLACE_WINDOW = 32 * 1024 * 1024  # bytes rewritten at a time by the timestamp cut
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def read_bytes(path: Path) -> bytearray:
    """The file's bytes, gunzipped when it is gzip; InputError when unreadable or truncated.

    A mutable buffer, so the timestamp cut can work in place.
    """
    try:
        with path.open("rb") as handle:
            if handle.read(2) != b"\x1f\x8b":
                buffer = bytearray(os.fstat(handle.fileno()).st_size)
                handle.seek(0)
                del buffer[handle.readinto(buffer) :]
                return buffer
            return _gunzip(handle, path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _gunzip(handle: BinaryIO, path: Path) -> bytearray:
    """Stream-decompress into one buffer sized from the gzip trailer (no doubling copies)."""
    handle.seek(-4, os.SEEK_END)
    size_hint = int.from_bytes(handle.read(4), "little")  # uncompressed size mod 2**32
    handle.seek(0)
    out = bytearray(size_hint)
    used = 0
    inflater = zlib.decompressobj(wbits=47)
    try:
        while chunk := handle.read(_READ_CHUNK):
            while chunk:
                piece = inflater.decompress(chunk)
                if used + len(piece) > len(out):
                    out.extend(bytes(used + len(piece) - len(out)))
                out[used : used + len(piece)] = piece
                used += len(piece)
                chunk = inflater.unused_data  # a further gzip member, if any
                if inflater.eof and chunk:
                    inflater = zlib.decompressobj(wbits=47)
                else:
                    chunk = b""
    except zlib.error as exc:
        raise InputError(f"{path}: damaged or truncated gzip ({exc})") from None
    if not inflater.eof:
        raise InputError(f"{path}: damaged or truncated gzip (unexpected end of data)")
    del out[used:]
    return out


def _cut_timestamp_prefix(data: bytearray) -> tuple[float, bool]:
    """Replace the shared leading digits of fractional timestamps by a 1, in place:
    (base_us, cut). The 1 keeps every shortened number valid JSON when its first kept digit
    is a 0, and the numbers below the 12 digits a cut needs."""
    match = _FRACTIONAL_TS.search(data, 0, _SNIFF_BYTES)
    if match is None:
        return 0.0, False
    digits = match.group(2)
    prefix = bytes(digits[: len(digits) - _KEEP_DIGITS])
    base_us = float((int(prefix) - 1) * 10**_KEEP_DIGITS)
    _replace_in_place(data, [(b'"ts": ' + prefix, b'"ts": 1'), (b'"ts":' + prefix, b'"ts":1')])
    return base_us, True


def _replace_in_place(data: bytearray, pairs: list[tuple[bytes, bytes]]) -> None:
    """bytes.replace for shrinking replacements, window by window, without a second full copy.

    Windows end just after a `}`: no pattern (which holds none) can straddle two windows.
    """
    read = write = 0
    size = len(data)
    while read < size:
        end = min(size, read + _REPLACE_WINDOW)
        if end < size:
            brace = data.rfind(b"}", read, end)
            end = brace + 1 if brace >= read else size
        piece = bytes(data[read:end])
        for old, new in pairs:
            piece = piece.replace(old, new)
        data[write : write + len(piece)] = piece  # shrinking: never overtakes `read`
        write += len(piece)
        read = end
    del data[write:]


def _parse(data: bytearray, path: Path) -> dict:
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


def _walk(data: bytearray, path: Path, sink: EventSink) -> dict[str, Any]:
    """Feed every event to the sink; returns the document's metadata we use.

    The events are first split as raw JSON slices (no objects built), then decoded one at a
    time, so only one event's objects exist at any moment.
    """
    try:
        document = DOCUMENT_DECODER.decode(data)
        decode_event = EVENT_DECODER.decode
        add = sink.add_fields
        for raw in document.traceEvents:
            e = decode_event(raw)
            if e.ph != "X":  # flows, instants, counters, metadata: nothing we use
                continue
            args = e.args
            if args is None:
                add("X", e.cat, e.name, e.ts, e.dur, None, None, None)
            else:
                add("X", e.cat, e.name, e.ts, e.dur, args.stream, args.correlation, args.bytes)
    except msgspec.DecodeError:
        sink.reset()
        return _walk_generic(data, path, sink)
    return {
        "distributedInfo": document.distributedInfo,
        "deviceProperties": document.deviceProperties,
    }


def _walk_generic(data: bytearray, path: Path, sink: EventSink) -> dict[str, Any]:
    document = _parse(data, path)
    for event in document["traceEvents"]:
        if isinstance(event, dict):
            sink.add(event)
    return {k: document.get(k) for k in ("distributedInfo", "deviceProperties")}


def window_steps(name: str) -> int | None:
    """Steps an agent's profiler window spans, from its file name (5 for
    `rank0-step20-25.pt.trace.json.gz`); None for a trace named otherwise."""
    window = WindowName.parse(name)
    return window.steps if window is not None and window.steps > 0 else None


_TYPED, _STRUCTS, _DICTS = 0, 1, 2  # how a batch was decoded


def _decode_batch(text: bytes) -> tuple[list[Any], int]:
    """(events, how): typed structs (walked a column at a time); structs of any field
    types; or orjson dicts for a batch that does not fit the schema at all (an event that
    is not an object, args that are not a mapping)."""
    try:
        return TYPED_EVENTS_DECODER.decode(text), _TYPED
    except msgspec.ValidationError:
        pass
    try:
        return EVENTS_DECODER.decode(text), _STRUCTS
    except msgspec.ValidationError:
        return orjson.loads(text), _DICTS


def _add_batch(sink: EventSink, events: list[Any], how: int) -> None:
    if how == _TYPED:
        sink.add_typed(events)
        return
    if how == _DICTS:
        for event in events:
            if isinstance(event, dict):
                sink.add(event)
        return
    add = sink.add_fields
    for e in events:
        if e.ph != "X":  # flows, instants, counters, metadata: nothing we use
            continue
        args = e.args
        if args is None:
            add("X", e.cat, e.name, e.ts, e.dur, None, None, None)
        else:
            add("X", e.cat, e.name, e.ts, e.dur, args.stream, args.correlation, args.bytes)


def load_trace(
    path: str | Path, *, fallback_rank: int = 0, memory_budget_mb: float | None = None
) -> RankTrace:
    """Load one Kineto trace file (plain or gzipped JSON) into a `RankTrace`, streaming it:
    memory is a chunk of the file plus the columns kept, whatever the file's size. With a
    memory budget (MB; default $PERFWEB_TRACE_MEMORY_MB, see `trace.budget`) a trace whose
    analysis would not fit keeps only its earliest stretch and says so (`degraded`)."""
    path = Path(path)
    budget = memory_budget_mb_setting(memory_budget_mb)
    stream = EventStream(path)
    sink: EventSink | None = None
    try:
        for events, how in stream.batches(_decode_batch):
            if sink is None:  # the stream has read the head: the timestamp cut is known
                sink = EventSink(
                    base_us=stream.base_us, prefix_cut=stream.prefix_cut, budget_mb=budget
                )
            _add_batch(sink, events, how)
            sink.enforce_budget()
    except NotStreamable:  # traceEvents not at the top of the first 64 MB: read it whole
        return load_trace_in_memory(path, fallback_rank=fallback_rank)
    assert sink is not None  # the last batch always comes
    return _built(sink, stream.meta, path, fallback_rank)


def _built(sink: EventSink, meta: dict[str, Any], path: Path, fallback_rank: int) -> RankTrace:
    info = meta.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    world_size = info.get("world_size")
    backend = info.get("backend")
    return build_rank_trace(
        sink,
        window_steps=window_steps(path.name),
        rank=_rank_of(meta, path, fallback_rank),
        source=str(path),
        world_size=world_size if isinstance(world_size, int) else None,
        backend=backend if isinstance(backend, str) else None,
        compute_capability=_compute_capability(meta),
    )


def load_trace_in_memory(path: str | Path, *, fallback_rank: int = 0) -> RankTrace:
    """`load_trace` with the whole file in memory at once: the reader for a document the
    stream cannot walk (and the reference the streaming reader is tested against)."""
    path = Path(path)
    data = read_bytes(path)
    check_format(data, path)
    base_us, cut = _cut_timestamp_prefix(data)
    sink = EventSink(base_us=base_us, prefix_cut=cut)
    meta = _walk(data, path, sink)
    del data
    return _built(sink, meta, path, fallback_rank)


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
        other = sorted(p.name for p in path.glob("*.pb"))[:1]
        hint = f"; {other[0]}: format not supported (JAX/TensorFlow xplane)" if other else ""
        raise InputError(f"{path}: no trace files (*.json, *.json.gz){hint}")
    traces = [load_trace(f, fallback_rank=i) for i, f in enumerate(files)]
    return sorted(traces, key=lambda t: t.rank)
