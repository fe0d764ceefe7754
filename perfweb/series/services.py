"""Writes of samples: a batch's series appended as small chunks, later compacted."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from django.db import transaction

from perfweb.runs.models import Run
from perfweb.series import codec
from perfweb.series.models import Chunk, Series


@dataclass(frozen=True)
class Samples:
    """One series' samples from a batch: validated float64 arrays of equal length."""

    device: str
    name: str
    t: np.ndarray
    v: np.ndarray


def series_append(*, run: Run, samples: Iterable[Samples]) -> int:
    """Stores each series' samples as one chunk; returns how many samples were stored.
    Call inside the batch's transaction."""
    batches = [s for s in samples if len(s.t)]
    if not batches:
        return 0
    ids = series_ids(run=run, keys={(s.device, s.name) for s in batches})
    Chunk.objects.bulk_create(
        [chunk_build(series_id=ids[s.device, s.name], t=s.t, v=s.v) for s in batches]
    )
    return sum(len(s.t) for s in batches)


def series_ids(*, run: Run, keys: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """The ids of the run's series with these (device, name) keys, creating missing ones
    (another rank of the same run may be creating them at the same moment)."""
    known = _known_series(run=run)
    missing = keys - known.keys()
    if missing:
        Series.objects.bulk_create(
            [Series(run=run, device=device, name=name) for device, name in sorted(missing)],
            ignore_conflicts=True,
        )
        known = _known_series(run=run)
    return known


def chunk_build(*, series_id: int, t: np.ndarray, v: np.ndarray, packed: bool = False) -> Chunk:
    if len(t) > 1 and not (np.diff(t) >= 0).all():
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    at_min, at_max = int(v.argmin()), int(v.argmax())
    encode = codec.encode if packed else codec.encode_plain
    return Chunk(
        series_id=series_id,
        t_min=float(t[0]),
        t_max=float(t[-1]),
        count=len(t),
        v_sum=float(v.sum()),
        v_min=float(v[at_min]),
        v_max=float(v[at_max]),
        t_at_min=float(t[at_min]),
        t_at_max=float(t[at_max]),
        data=encode(t=t, v=v),
        rollup_fine=codec.rollup(t=t, v=v, bucket=codec.FINE_BUCKET),
        rollup_coarse=codec.rollup(t=t, v=v, bucket=codec.COARSE_BUCKET),
    )


class _Raced(Exception):
    """Another compaction took some of the same chunks first."""


def series_compact(*, series_id: int) -> int:
    """Merges the series' small chunks into full ones of codec.CHUNK_SAMPLES samples (and one
    remainder), packed. The samples are the same before and after, so counts stay exact;
    concurrent ingest only adds chunks, which this leaves alone. Returns chunks removed."""
    try:
        with transaction.atomic():
            return _compact(series_id=series_id)
    except _Raced:
        return 0


def _compact(*, series_id: int) -> int:
    rows = list(
        Chunk.objects.filter(series_id=series_id, count__lt=codec.CHUNK_SAMPLES)
        .order_by("t_min", "id")
        .values_list("id", "count", "data")
    )
    if not rows or (len(rows) == 1 and bytes(rows[0][2][:1])[0] == codec.PACKED):
        return 0
    parts = [codec.decode(blob=bytes(data), count=count) for _, count, data in rows]
    t = np.concatenate([p[0] for p in parts])
    v = np.concatenate([p[1] for p in parts])
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    ids = [row_id for row_id, _, _ in rows]
    deleted, _ = Chunk.objects.filter(id__in=ids).delete()
    if deleted != len(ids):
        raise _Raced
    Chunk.objects.bulk_create(
        [
            chunk_build(
                series_id=series_id,
                t=t[i : i + codec.CHUNK_SAMPLES],
                v=v[i : i + codec.CHUNK_SAMPLES],
                packed=True,
            )
            for i in range(0, len(t), codec.CHUNK_SAMPLES)
        ]
    )
    return len(ids)


def run_compact(*, run_id: int) -> int:
    """Compacts every series of the run (by the run's primary key)."""
    series = Series.objects.filter(run_id=run_id).values_list("id", flat=True)
    return sum(series_compact(series_id=series_id) for series_id in series)


def _known_series(*, run: Run) -> dict[tuple[str, str], int]:
    rows = Series.objects.filter(run=run).values_list("device", "name", "id")
    return {(device, name): series_id for device, name, series_id in rows}
