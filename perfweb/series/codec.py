"""Packing of a chunk's samples into bytes, and the min/max rollups beside them.

`data` as ingest writes it (PLAIN): each batch's samples of a series nearly as they are, since
even zlib's fastest level costs more than the rest of a batch's work. Values are float32 when
that is exact (most GPU metrics); times are the first one's float64 bits and, for the others,
the uint32 difference of their bits from it (exact: the bits of non-negative doubles grow with
the value, and 2^32 steps of 2^-22 s span 1024 s at today's Unix times), else float64s.
Compaction rewrites them PACKED within a minute or so.

`data` once compacted (PACKED): times and values as float64 bit patterns, made small before
zlib:
- times: delta-of-delta of the bit patterns. For Unix seconds between 2004 and 2038 the
  exponent is fixed, so the pattern grows with the time and the second difference is the
  sampling jitter in units of 2^-22 s; exact, sub-microsecond digits included.
- values: when every value is a decimal with at most 6 digits after the point (utilisation,
  bytes, watts in mW steps, clocks — what agents send), the differences of the scaled
  integers; otherwise each value's bits XORed with the one before. Decoding checks nothing:
  encode only takes the decimal path when dividing back gives the very same doubles.
Both are byte-shuffled (all first bytes, then all second bytes, …) so that zlib sees long
runs. Integer arithmetic wraps in numpy, and decoding inverts it exactly: lossless.

Rollups are raw little-endian float64 (t, v) pairs: small, and a read decodes all of them at
once with one `np.frombuffer` over the joined blobs.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

CHUNK_SAMPLES = 8192  # samples per compacted chunk
FINE_BUCKET = 64  # rollup_fine: min and max of every 64 samples
COARSE_BUCKET = 1024  # rollup_coarse: of every 1024
ROLLUP_MIN_SAMPLES = 4 * FINE_BUCKET  # the fewest samples any rollup is made of (see rollup)
PLAIN = 0  # ingest's format: nearly as they are (cheapest to write)
PACKED = 1  # compaction's format: transformed as above, then compressed hard
SINGLE = 1  # a flag in PLAIN's second byte: the values are float32 (exactly)
OFFSETS = 2  # a flag in PLAIN's second byte: the times are a base and uint32 offsets
MAX_OFFSET = 2**32
XOR_VALUES = 255  # the values byte when values are XORed instead of scaled
MAX_DECIMALS = 6


def encode_plain(*, t: np.ndarray, v: np.ndarray) -> bytes:
    """Sorted float64 arrays of equal length, as a batch's small chunk (see above)."""
    if not len(t):
        return plain(b"", b"", single=True)
    whole = PlainBatch.of(t=t, v=v, starts=np.array([0]), lengths=np.array([len(t)]))
    return whole.encode(0, 0, len(t))


@dataclass(frozen=True)
class PlainBatch:
    """encode_plain of many series at once: worked out over their concatenated samples (each
    series sorted, starting at `starts` with `lengths` samples) and sliced per series. A
    batch has ~100 short series, and numpy's per-call cost would otherwise exceed the work."""

    t_bytes: bytes
    bases: bytes  # each series' first time, as float64 bits
    offsets: bytes  # every time's bits minus its series' first, as uint32
    compact: list[bool]  # per series: do its offsets fit?
    v_bytes: bytes
    v32_bytes: bytes
    single: list[bool]  # per series: are its values float32, exactly?

    @classmethod
    def of(
        cls, *, t: np.ndarray, v: np.ndarray, starts: np.ndarray, lengths: np.ndarray
    ) -> PlainBatch:
        bits = t.astype("<f8").view("<i8")
        bases = bits[starts]
        offsets = bits - np.repeat(bases, lengths)
        fits = (offsets >= 0) & (offsets < MAX_OFFSET)
        compact = np.logical_and.reduceat(fits, starts) & (bases >= 0)
        with np.errstate(over="ignore"):  # too big for float32: inf, then not exact
            v32 = v.astype("<f4")
        return cls(
            t_bytes=bits.tobytes(),
            bases=bases.tobytes(),
            offsets=offsets.astype("<u4").tobytes(),
            compact=compact.tolist(),
            v_bytes=v.astype("<f8").tobytes(),
            v32_bytes=v32.tobytes(),
            single=np.logical_and.reduceat(exact_as_float32(v, v32), starts).tolist(),
        )

    def encode(self, i: int, a: int, b: int) -> bytes:
        """encode_plain of series i, which is samples a:b."""
        single, compact = self.single[i], self.compact[i]
        values = self.v32_bytes[4 * a : 4 * b] if single else self.v_bytes[8 * a : 8 * b]
        if compact:
            times = self.bases[8 * i : 8 * i + 8] + self.offsets[4 * a : 4 * b]
        else:
            times = self.t_bytes[8 * a : 8 * b]
        return plain(times, values, single=single, offsets=compact)


def exact_as_float32(v: np.ndarray, v32: np.ndarray) -> np.ndarray:
    """Per value: does float32 give back the very same double (bits compared, so -0.0 and
    0.0 differ)?"""
    return v32.astype(np.float64).view(np.int64) == v.view(np.int64)


def plain(times: bytes, values: bytes, *, single: bool = False, offsets: bool = False) -> bytes:
    """encode_plain from the times' and the values' bytes, laid out as the flags say."""
    return bytes((PLAIN, (SINGLE if single else 0) | (OFFSETS if offsets else 0))) + times + values


def encode(*, t: np.ndarray, v: np.ndarray, level: int = 6) -> bytes:
    """Packs sorted float64 arrays of equal length; `level` is zlib's (1 fast, 9 small)."""
    bits = t.view(np.int64)
    second_difference = np.diff(np.diff(bits, prepend=np.int64(0)), prepend=np.int64(0))
    decimals, value_words = _value_words(v)
    packed = _shuffle(second_difference) + _shuffle(value_words)
    return bytes((PACKED, decimals)) + zlib.compress(packed, level)


def decode(*, blob: bytes, count: int) -> tuple[np.ndarray, np.ndarray]:
    if blob[0] == PLAIN:
        flags = blob[1]
        if flags & OFFSETS:
            base = np.frombuffer(blob, dtype="<i8", count=1, offset=2)
            offsets = np.frombuffer(blob, dtype="<u4", count=count, offset=10)
            t = (offsets.astype(np.int64) + base).view(np.float64)
            values_at = 10 + 4 * count
        else:
            t = np.frombuffer(blob, dtype="<f8", count=count, offset=2)
            values_at = 2 + 8 * count
        values = "<f4" if flags & SINGLE else "<f8"
        v = np.frombuffer(blob, dtype=values, count=count, offset=values_at)
        return t, v.astype(np.float64)
    raw = zlib.decompress(memoryview(blob)[2:])
    decimals = blob[1]
    second_difference = _unshuffle(raw[: 8 * count], count)
    value_words = _unshuffle(raw[8 * count :], count)
    t = np.cumsum(np.cumsum(second_difference)).view(np.float64)
    if decimals == XOR_VALUES:
        v = np.bitwise_xor.accumulate(value_words).view(np.float64)
    else:
        v = np.cumsum(value_words) / float(10**decimals)
    return t, v


def _value_words(v: np.ndarray) -> tuple[int, np.ndarray]:
    """(decimals, differences of v·10^decimals) when that is exact, else (XOR_VALUES, …)."""
    largest = float(np.abs(v).max()) if len(v) else 0.0
    for decimals in range(MAX_DECIMALS + 1):
        scale = float(10**decimals)
        if largest * scale < 2.0**52:
            scaled = np.round(v * scale).astype(np.int64)
            # Compare bits of what decode will give: -0.0 == 0.0, but comes back as 0.0.
            if np.array_equal((scaled / scale).view(np.int64), v.view(np.int64)):
                return decimals, np.diff(scaled, prepend=np.int64(0))
    bits = v.view(np.int64)
    return XOR_VALUES, bits ^ np.concatenate(([np.int64(0)], bits[:-1]))


def rollup(*, t: np.ndarray, v: np.ndarray, bucket: int) -> bytes | None:
    """The (t, v) of the minimum and the maximum of every `bucket` samples, in time order;
    None when that would not be much smaller than the samples themselves."""
    if len(t) < 4 * bucket:
        return None
    index = _extreme_indexes(v, bucket)
    return pack_points(t=t[index], v=v[index])


def pack_points(*, t: np.ndarray, v: np.ndarray) -> bytes:
    return np.column_stack((t, v)).astype("<f8").tobytes()


def unpack_points(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    pairs = np.frombuffer(b"".join(blobs), dtype="<f8").reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def _extreme_indexes(v: np.ndarray, bucket: int) -> np.ndarray:
    whole = len(v) // bucket * bucket
    grid = v[:whole].reshape(-1, bucket)
    offsets = np.arange(0, whole, bucket)
    parts = [grid.argmin(axis=1) + offsets, grid.argmax(axis=1) + offsets]
    if whole < len(v):
        tail = v[whole:]
        parts.append(np.array([whole + tail.argmin(), whole + tail.argmax()]))
    return np.unique(np.concatenate(parts))


def _shuffle(words: np.ndarray) -> bytes:
    return words.astype("<i8").view(np.uint8).reshape(-1, 8).T.tobytes()


def _unshuffle(raw: bytes, count: int) -> np.ndarray:
    planes = np.frombuffer(raw, dtype=np.uint8).reshape(8, count)
    return np.ascontiguousarray(planes.T).view("<i8").reshape(count).astype(np.int64)
