"""Writes of samples: a batch's series appended as small chunks, later compacted."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from perfweb.runs.models import Run
from perfweb.runs.samples import SampleBlock, Samples
from perfweb.series import codec
from perfweb.series.models import Chunk, Series


@dataclass(frozen=True)
class PreparedChunk:
    """A chunk's columns but its series id: built before the transaction opens, so that
    the database is locked only for the inserts."""

    device: str
    name: str
    columns: tuple[object, ...]


CHUNK_COLUMNS = (
    "t_min", "t_max", "count", "v_sum", "v_min", "v_max", "t_at_min", "t_at_max", "data",
    "rollup_fine", "rollup_coarse",
)  # fmt: skip
COPY_TYPES = ("int8", *["float8"] * 2, "int4", *["float8"] * 5, *["bytea"] * 3)


def chunks_prepare(*, samples: Iterable[Samples] | SampleBlock) -> list[PreparedChunk]:
    """One small chunk per series of a batch (see codec.encode_plain), none for a series
    without samples. The per-series statistics are computed for the whole batch at once: a
    batch has ~100 short series, and numpy's per-call cost would otherwise exceed the
    work."""
    block = samples if isinstance(samples, SampleBlock) else SampleBlock.of(samples)
    keys = [key for key, n in zip(block.keys, block.lengths, strict=True) if n]
    if not keys:
        return []
    lengths = np.array([n for n in block.lengths if n])
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    t, v = block.t, block.v
    unsorted = np.diff(t) < 0
    unsorted[starts[1:] - 1] = False  # a drop from one series to the next is fine
    if unsorted.any():
        order = np.lexsort((t, np.repeat(np.arange(len(keys)), lengths)))
        t, v = t[order], v[order]
    at_min = _first_where(v == np.repeat(np.minimum.reduceat(v, starts), lengths), starts)
    at_max = _first_where(v == np.repeat(np.maximum.reduceat(v, starts), lengths), starts)
    sums = np.add.reduceat(v, starts)
    ends = starts + lengths
    # Plain Python numbers and bytes once for the batch, sliced per series below.
    firsts, lasts, totals = t[starts].tolist(), t[ends - 1].tolist(), sums.tolist()
    lows, highs = v[at_min].tolist(), v[at_max].tolist()
    low_times, high_times = t[at_min].tolist(), t[at_max].tolist()
    batch = codec.PlainBatch.of(t=t, v=v, starts=starts, lengths=lengths)
    prepared = []
    for i, ((device, name), a, b) in enumerate(
        zip(keys, starts.tolist(), ends.tolist(), strict=True)
    ):
        columns = (
            firsts[i],
            lasts[i],
            b - a,
            totals[i],
            lows[i],
            highs[i],
            low_times[i],
            high_times[i],
            batch.encode(i, a, b),
            *(_rollups(t[a:b], v[a:b]) if b - a >= codec.ROLLUP_MIN_SAMPLES else NO_ROLLUPS),
        )
        prepared.append(PreparedChunk(device=device, name=name, columns=columns))
    return prepared


NO_ROLLUPS = (None, None)


def _rollups(t: np.ndarray, v: np.ndarray) -> tuple[bytes | None, bytes | None]:
    return (
        codec.rollup(t=t, v=v, bucket=codec.FINE_BUCKET),
        codec.rollup(t=t, v=v, bucket=codec.COARSE_BUCKET),
    )


def _first_where(hits: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """For each segment beginning at `starts`, the index of its first True in `hits`
    (every segment has one)."""
    positions = np.flatnonzero(hits)
    return positions[np.searchsorted(positions, starts)]


def series_append(*, run: Run, samples: Iterable[Samples]) -> int:
    """Stores each series' samples as one chunk; returns how many samples were stored.
    Call inside a transaction (the batch's)."""
    return chunks_store(run=run, chunks=chunks_prepare(samples=samples))


def chunks_store(*, run: Run, chunks: list[PreparedChunk]) -> int:
    """Stores prepared chunks in the run's series; returns how many samples that was."""
    chunks_insert(rows=chunk_rows(run=run, chunks=chunks))
    return sum(int(c.columns[2]) for c in chunks)  # type: ignore[call-overload]


def chunk_rows(
    *, run: Run, chunks: list[PreparedChunk], known: dict[tuple[str, str], int] | None = None
) -> list[tuple[object, ...]]:
    """The chunks as rows for chunks_insert, their series created where missing (`known`:
    the run's series ids as series_known read them, if the caller has them)."""
    if not chunks:
        return []
    ids = series_ids(run=run, keys={(c.device, c.name) for c in chunks}, known=known)
    return [(ids[c.device, c.name], *c.columns) for c in chunks]


def chunks_insert(*, rows: list[tuple[object, ...]], cursor: CursorWrapper | None = None) -> None:
    """Rows of (series_id, *CHUNK_COLUMNS), without model instances: binary COPY on
    PostgreSQL (a third of executemany's time), executemany on SQLite. On the caller's
    cursor, if it has one."""
    if not rows:
        return
    with contextlib.nullcontext(cursor) if cursor is not None else connection.cursor() as cursor:
        table = Chunk._meta.db_table
        names = ", ".join(("series_id", *CHUNK_COLUMNS))
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(COPY_TYPES)
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join(["%s"] * (len(CHUNK_COLUMNS) + 1))
            cursor.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)


def series_ids(
    *,
    run: Run,
    keys: set[tuple[str, str]],
    known: dict[tuple[str, str], int] | None = None,
) -> dict[tuple[str, str], int]:
    """The ids of the run's series with these (device, name) keys, creating missing ones
    (another rank of the same run may be creating them at the same moment)."""
    known = series_known(run=run) if known is None else known
    missing = keys - known.keys()
    if missing:
        Series.objects.bulk_create(
            [Series(run=run, device=device, name=name) for device, name in sorted(missing)],
            ignore_conflicts=True,
        )
        known = series_known(run=run)
    return known


def chunk_columns(*, t: np.ndarray, v: np.ndarray, packed: bool = False) -> tuple[object, ...]:
    """The CHUNK_COLUMNS of one chunk of samples (sorted here if they are not)."""
    if len(t) > 1 and not (np.diff(t) >= 0).all():
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    at_min, at_max = int(v.argmin()), int(v.argmax())
    encode = codec.encode if packed else codec.encode_plain
    return (
        float(t[0]),
        float(t[-1]),
        len(t),
        float(v.sum()),
        float(v[at_min]),
        float(v[at_max]),
        float(t[at_min]),
        float(t[at_max]),
        encode(t=t, v=v),
        codec.rollup(t=t, v=v, bucket=codec.FINE_BUCKET),
        codec.rollup(t=t, v=v, bucket=codec.COARSE_BUCKET),
    )


class _Raced(Exception):
    """Another compaction took some of the same chunks first."""


COMPACT_MAX_CHUNKS = 4000  # per pass: bounds memory and the DELETE's id list


def series_compact(*, series_id: int) -> int:
    """Merges the series' small chunks into full ones of codec.CHUNK_SAMPLES samples (and one
    remainder), packed. The samples are the same before and after, so counts stay exact;
    concurrent ingest only adds chunks, which this leaves alone. The merging happens outside
    the transaction (SQLite's write lock is held only to swap the rows); if another
    compaction took any of the same chunks first, this one changes nothing. Returns the
    number of chunks merged."""
    rows = list(
        Chunk.objects.filter(series_id=series_id, count__lt=codec.CHUNK_SAMPLES)
        .order_by("t_min", "id")
        .values_list("id", "count", "data")[:COMPACT_MAX_CHUNKS]
    )
    if not rows or (len(rows) == 1 and bytes(rows[0][2][:1])[0] == codec.PACKED):
        return 0
    parts = [codec.decode(blob=bytes(data), count=count) for _, count, data in rows]
    t = np.concatenate([p[0] for p in parts])
    v = np.concatenate([p[1] for p in parts])
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    step = codec.CHUNK_SAMPLES
    merged = [
        (series_id, *chunk_columns(t=t[i : i + step], v=v[i : i + step], packed=True))
        for i in range(0, len(t), step)
    ]
    ids = [row_id for row_id, _, _ in rows]
    try:
        with transaction.atomic():
            deleted, _ = Chunk.objects.filter(id__in=ids).delete()
            if deleted != len(ids):
                raise _Raced
            chunks_insert(rows=merged)
    except _Raced:
        return 0
    return len(ids)


def run_compact(*, run_id: int) -> int:
    """Compacts every series of the run (by the run's primary key)."""
    series = Series.objects.filter(run_id=run_id).values_list("id", flat=True)
    return sum(series_compact(series_id=series_id) for series_id in series)


def series_known(*, run: Run) -> dict[tuple[str, str], int]:
    """{(device, name): id} of the run's series."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT device, name, id FROM {Series._meta.db_table} WHERE run_id = %s", [run.id]
        )
        return {(device, name): series_id for device, name, series_id in cursor.fetchall()}
