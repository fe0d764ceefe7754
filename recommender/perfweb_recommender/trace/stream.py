"""Read a Kineto trace's `traceEvents` array in batches, without holding the file.

The file (plain or gzipped JSON) is read a chunk at a time; each batch is the raw text of
consecutive whole events, handed to the caller's decoder as one JSON array, so memory stays
at about a chunk plus what the caller keeps of the decoded events, whatever the file's size.

Where one batch ends is guessed, then checked: a batch is cut just after a `}` that is
followed by `,` and the next `{` (how Kineto writes `  },\\n  {`), and the decoder parses
`[` + batch + `]`. A wrong guess (a `},{` inside a kernel name, or inside an event's args)
leaves a string or an object open, so that parse fails and an earlier `}` is tried; after a
few misses an exact scan of the chunk (strings skipped, brackets counted) finds the cut.
The array's end is found the same way, from the last `]` of the file.

The document's other keys (deviceProperties, distributedInfo, ...) are decoded from the
text before and after the array. Nanosecond timestamps lose their shared leading digits
batch by batch, exactly as `loader` did on the whole file (see `loader`).
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Callable, Iterator
from io import BufferedReader
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import orjson

from perfweb_recommender.errors import InputError

T = TypeVar("T")
_Pieces = Iterator[bytes | memoryview]

CHUNK_BYTES = 4 * 1024 * 1024  # uncompressed bytes per batch, about (8 MB: +18 MB peak, no faster)
_READ_CHUNK = 1024 * 1024  # bytes per read (compressed, for gzip)
_HEAD_LIMIT = 64 * 1024 * 1024  # the text before traceEvents: beyond this, not a stream
_GUESSES = 4  # guessed cuts tried before the exact scan
_FRACTIONAL_TS = re.compile(rb'"ts":( ?)(\d{12,})\.\d')
_KEEP_DIGITS = 10  # digits kept after the cut, behind a 1: [1e10, 2e10) µs, exact to 2e-6 µs
_SNIFF_BYTES = 4 * 1024 * 1024
_FORMAT_SNIFF = 64  # leading bytes that tell JSON from a binary format
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_NEXT_EVENT = re.compile(rb"\s*,\s*\{")
# A string (one cut off by the chunk's end runs to it) or a bracket.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)
_BAD_CUT = (msgspec.DecodeError, orjson.JSONDecodeError)


class NotStreamable(Exception):
    """The document is not a traceEvents object (or bare array) this reader can walk."""


class _Head(msgspec.Struct):
    traceEvents: list[Any]  # noqa: N815 - the format's key (empty here: the events are cut out)
    distributedInfo: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815


def _chunks(handle: BufferedReader, path: Path) -> _Pieces:
    """The file's bytes, gunzipped (every member) when it is gzip, a piece at a time (a
    piece is only valid until the next is asked for: the reader appends it at once)."""
    magic = handle.read(2)
    handle.seek(0)
    if magic != b"\x1f\x8b":
        scratch = bytearray(_READ_CHUNK * 4)
        with memoryview(scratch) as view:
            while size := handle.readinto(scratch):
                yield view[:size]
        return
    inflater = zlib.decompressobj(wbits=47)
    try:
        while chunk := handle.read(_READ_CHUNK):
            while chunk:  # at most 4 reads' worth out at a time: a trace inflates ~20x
                yield inflater.decompress(chunk, _READ_CHUNK * 4)
                if not inflater.eof:
                    chunk = inflater.unconsumed_tail
                    continue
                chunk = inflater.unused_data  # a further gzip member, if any
                if chunk:
                    inflater = zlib.decompressobj(wbits=47)
    except zlib.error as exc:
        raise InputError(f"{path}: damaged or truncated gzip ({exc})") from None
    if not inflater.eof:
        raise InputError(f"{path}: damaged or truncated gzip (unexpected end of data)")


def uncompressed_size(path: Path) -> int:
    """The trace's JSON size in bytes: the file's, or a gzip's from its trailer (mod 4 GiB,
    so a lower bound past that; a multi-member gzip reads as its last member)."""
    with path.open("rb") as handle:
        if handle.read(2) != b"\x1f\x8b":
            return os.fstat(handle.fileno()).st_size
        handle.seek(-4, os.SEEK_END)
        size = int.from_bytes(handle.read(4), "little")
        return max(size, os.fstat(handle.fileno()).st_size)


def check_format(data: bytes | bytearray, path: Path) -> None:
    """InputError naming the format when the bytes are not a JSON document (a JAX/TensorFlow
    `.xplane.pb` protobuf, a PyTorch `.pt` file, ...): one clear sentence, not a parser's."""
    start = bytes(data[:_FORMAT_SNIFF]).removeprefix(b"\xef\xbb\xbf").lstrip()
    if start[:1] in (b"{", b"["):
        return
    name = path.name.lower()
    if name.endswith((".xplane.pb", ".pb", ".pb.gz")):
        kind = "a JAX/TensorFlow profiler protobuf (.xplane.pb)"
    elif not start:
        kind = "an empty file"
    else:
        kind = "not JSON"
    raise InputError(
        f"{path}: format not supported: {kind}; analyze a PyTorch profiler (Kineto) trace, "
        ".json or .json.gz"
    )


def _exact_cut(buf: bytes | bytearray, start: int, end: int) -> tuple[int, bool]:
    """(position just after the last whole top-level element in buf[start:end], whether the
    array's closing `]` came first: then the position is that `]`'s). -1 when none."""
    depth = 0
    last = -1
    for token in _TOKEN.finditer(buf, start, end):
        char = token.group()
        if char in (b"{", b"["):
            depth += 1
        elif char in (b"}", b"]"):
            depth -= 1
            if depth == 0:
                last = token.end()
            elif depth < 0:
                return token.start(), True
    return last, False


class EventStream:
    """One trace's events, in batches: `for batch in stream.batches(decode)`; afterwards
    `meta` holds the document's other keys and `base_us`/`prefix_cut` the timestamp cut."""

    def __init__(self, path: Path, *, chunk_bytes: int | None = None) -> None:
        self.path = path
        self.chunk_bytes = chunk_bytes or CHUNK_BYTES
        self.meta: dict[str, Any] = {}
        self.base_us = 0.0
        self.prefix_cut = False
        self.bytes_read = 0
        self._pairs: list[tuple[bytes, bytes]] = []

    def batches(self, decode: Callable[[bytes], T]) -> Iterator[T]:
        """Decoded batches; `decode` takes a JSON array's text and raises msgspec's or
        orjson's decode error when it is not valid JSON (a wrong cut, tried again)."""
        try:
            handle = self.path.open("rb")
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        with handle:
            yield from self._walk(_chunks(handle, self.path), decode)

    def _fill(self, buf: bytearray, pieces: _Pieces, want: int) -> bool:
        """Read until buf holds `want` bytes; False at the end of the file."""
        while len(buf) < want:
            piece = next(pieces, None)
            if piece is None:
                return False
            self.bytes_read += len(piece)
            buf += piece
        return True

    def _head(self, buf: bytearray, pieces: _Pieces) -> tuple[bytes, int]:
        """(the document's text before the events, where the events start in buf)."""
        more = self._fill(buf, pieces, _SNIFF_BYTES)
        check_format(buf, self.path)
        self._sniff_cut(buf)
        start = bytes(buf[:64]).removeprefix(b"\xef\xbb\xbf").lstrip()
        if start.startswith(b"["):
            return b"", buf.index(b"[") + 1
        while True:
            match = _EVENTS_KEY.search(buf)
            if match is not None:
                head = bytes(buf[: match.end()])
                try:  # the key at the document's top level, after valid JSON
                    msgspec.json.decode(head + b"]}", type=_Head)
                except msgspec.DecodeError:
                    raise NotStreamable from None
                return head, match.end()
            if not more or len(buf) > _HEAD_LIMIT:
                raise NotStreamable
            more = self._fill(buf, pieces, len(buf) + self.chunk_bytes)

    def _sniff_cut(self, buf: bytearray) -> None:
        match = _FRACTIONAL_TS.search(buf, 0, _SNIFF_BYTES)
        if match is None:
            return
        digits = match.group(2)
        prefix = bytes(digits[: len(digits) - _KEEP_DIGITS])
        self.base_us = float((int(prefix) - 1) * 10**_KEEP_DIGITS)
        self.prefix_cut = True
        self._pairs = [(b'"ts": ' + prefix, b'"ts": 1'), (b'"ts":' + prefix, b'"ts":1')]

    def _decoded(self, decode: Callable[[bytes], T], buf: bytearray, start: int, close: int) -> T:
        """decode(`[` + buf[start:close] + `]`), the brackets written in place over the bytes
        around the events (the `[` or `,` before them, the `,` or blank after), no copy."""
        saved = buf[close]
        buf[start - 1], buf[close] = 0x5B, 0x5D  # [ ]
        try:
            with memoryview(buf) as view, view[start - 1 : close + 1] as text:
                if not self._pairs:
                    return decode(text)  # type: ignore[arg-type]
                cut = bytes(text)
            for old, new in self._pairs:
                cut = cut.replace(old, new)
            return decode(cut)
        finally:
            buf[close] = saved

    def _walk(self, pieces: _Pieces, decode: Callable[[bytes], T]) -> Iterator[T]:
        buf = bytearray()
        head, start = self._head(buf, pieces)
        want = start + self.chunk_bytes
        while self._fill(buf, pieces, want):
            cut, decoded = self._cut_batch(buf, start, decode)
            if cut < 0:  # no whole event in the chunk (a huge one): read on
                want = len(buf) + self.chunk_bytes
                continue
            yield decoded
            del buf[: cut - 1]  # keep the `,` before the next event: the next batch's `[`
            start = 1
            want = self.chunk_bytes
        close, decoded = self._last_batch(buf, start, decode)
        yield decoded
        self._read_meta(head, bytes(buf[close + 1 :]))

    def _cut_batch(
        self, buf: bytearray, start: int, decode: Callable[[bytes], T]
    ) -> tuple[int, Any]:
        """(where the next batch starts, the decoded batch); (-1, None) when buf[start:]
        holds no whole event and the array's end."""
        end = len(buf)
        for _ in range(_GUESSES):
            brace = buf.rfind(b"}", start, end)
            while brace >= 0 and not _NEXT_EVENT.match(buf, brace + 1):
                brace = buf.rfind(b"}", start, brace)
            if brace < 0:
                break
            try:
                decoded = self._decoded(decode, buf, start, brace + 1)
            except _BAD_CUT:
                end = brace
                continue
            return _NEXT_EVENT.match(buf, brace + 1).end() - 1, decoded  # type: ignore[union-attr]
        cut, closed = _exact_cut(buf, start, len(buf))
        if closed or cut < 0:
            return -1, None
        comma = buf.find(b",", cut)
        if comma < 0 or buf[cut:comma].strip():  # the last element, or not yet its comma
            return -1, None
        return comma + 1, self._decode(decode, buf, start, cut)

    def _decode(self, decode: Callable[[bytes], T], buf: bytearray, start: int, end: int) -> T:
        try:
            return self._decoded(decode, buf, start, end)
        except _BAD_CUT as exc:
            raise InputError(f"{self.path}: not JSON ({exc})") from None

    def _last_batch(
        self, buf: bytearray, start: int, decode: Callable[[bytes], T]
    ) -> tuple[int, T]:
        """(position of the array's `]`, its last events decoded), the file all read."""
        end = len(buf)
        for _ in range(_GUESSES):
            close = buf.rfind(b"]", start, end)
            if close < 0:
                break
            try:
                return close, self._decoded(decode, buf, start, close)
            except _BAD_CUT:
                end = close
        cut, closed = _exact_cut(buf, start, len(buf))
        if not closed:
            raise InputError(f"{self.path}: not JSON (the traceEvents array never ends)")
        return cut, self._decode(decode, buf, start, cut)

    def _read_meta(self, head: bytes, tail: bytes) -> None:
        if not head:  # a bare array: nothing but events
            if tail.strip():
                raise InputError(f"{self.path}: not JSON (text after the event list)")
            return
        try:
            document = msgspec.json.decode(head + b"]" + tail, type=_Head)
        except msgspec.DecodeError as exc:
            raise InputError(f"{self.path}: not JSON ({exc})") from None
        self.meta = {
            "distributedInfo": document.distributedInfo,
            "deviceProperties": document.deviceProperties,
        }
