"""Reads of samples: any time range of any series, downsampled to a number of points.

Each series is read at the coarsest level that still gives the downsampler enough points
(`OVERSAMPLING` × the points asked for): raw samples, the fine rollups (min/max of every 64),
the coarse ones (of every 1024) or each chunk's extremes. Chunks that the range only partly
covers are always decoded, so edges are exact and so is `raw_count`. The last step is
MinMaxLTTB (tsdownsample), which keeps each interval's extremes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connection
from django.db.models import Max, Min, Sum
from tsdownsample import MinMaxLTTBDownsampler

from perfweb.runs.models import Run
from perfweb.series import codec
from perfweb.series.models import Chunk, Series
from perfweb_contract.protocol import METRICS

OVERSAMPLING = 16
RAW, FINE, COARSE, EXTREMES = "data", "rollup_fine", "rollup_coarse", "extremes"
_CHUNK_COLUMNS = (
    "id", "series_id", "t_min", "t_max", "count", "t_at_min", "v_min", "t_at_max", "v_max",
)  # fmt: skip


@dataclass
class SeriesPoints:
    device: str
    name: str
    raw_count: int
    t: np.ndarray
    v: np.ndarray

    @property
    def unit(self) -> str:
        return METRICS.get(self.name, "")

    @property
    def downsampled(self) -> bool:
        return len(self.t) < self.raw_count

    def as_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "name": self.name,
            "unit": self.unit,
            "raw_count": self.raw_count,
            "downsampled": self.downsampled,
            "t": self.t,
            "v": self.v,
        }


def series_read(
    *,
    run: Run,
    names: list[str] | None = None,
    devices: list[str] | None = None,
    start: float | None = None,
    end: float | None = None,
    points: int = 1000,
) -> list[SeriesPoints]:
    """The run's series (all, or those with these names/devices) within [start, end], each
    at most `points` long, ordered by device then name."""
    series = Series.objects.filter(run=run)
    if names:
        series = series.filter(name__in=names)
    if devices:
        series = series.filter(device__in=devices)
    keys = {sid: (device, name) for sid, device, name in series.values_list("id", "device", "name")}
    by_series = _chunk_rows(list(keys), start=start, end=end)
    plans = {
        sid: _plan(rows, start=start, end=end, budget=points * OVERSAMPLING)
        for sid, rows in by_series.items()
    }
    blobs = _fetch_blobs(plans)
    result = [
        _assemble(keys[sid], plan, blobs, start=start, end=end, points=points)
        for sid, plan in plans.items()
    ]
    return sorted(result, key=lambda s: (s.device, s.name))


def series_span(*, run: Run) -> list[dict[str, Any]]:
    """Every series the run has: device, name, unit, count and time span."""
    rows = (
        Chunk.objects.filter(series__run=run)
        .values("series__device", "series__name")
        .annotate(count=Sum("count"), start=Min("t_min"), end=Max("t_max"))
        .order_by("series__device", "series__name")
    )
    return [
        {
            "device": row["series__device"],
            "name": row["series__name"],
            "unit": METRICS.get(row["series__name"], ""),
            "count": row["count"],
            "start": row["start"],
            "end": row["end"],
        }
        for row in rows
    ]


def series_spans(*, run_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """`series_span` of many runs in one query (device, name, count and span per series)."""
    rows = (
        Chunk.objects.filter(series__run_id__in=run_ids)
        .values("series__run_id", "series__device", "series__name")
        .annotate(count=Sum("count"), start=Min("t_min"), end=Max("t_max"))
        .order_by("series__run_id", "series__device", "series__name")
    )
    spans: dict[int, list[dict[str, Any]]] = {run_id: [] for run_id in run_ids}
    for row in rows:
        spans[row["series__run_id"]].append(
            {
                "device": row["series__device"],
                "name": row["series__name"],
                "unit": METRICS.get(row["series__name"], ""),
                "count": row["count"],
                "start": row["start"],
                "end": row["end"],
            }
        )
    return spans


def series_means(*, run_ids: list[int], name: str) -> dict[int, float]:
    """The mean of every sample of series `name` (all devices together), per run."""
    rows = (
        Chunk.objects.filter(series__run_id__in=run_ids, series__name=name)
        .values("series__run_id")
        .annotate(total=Sum("v_sum"), count=Sum("count"))
    )
    return {row["series__run_id"]: row["total"] / row["count"] for row in rows if row["count"]}


@dataclass
class _Plan:
    level: str
    inside: list[tuple[Any, ...]]  # chunks wholly within the range
    edges: list[tuple[Any, ...]]  # chunks the range covers only partly: decoded


def _plan(
    rows: list[tuple[Any, ...]], *, start: float | None, end: float | None, budget: int
) -> _Plan:
    inside: list[tuple[Any, ...]] = []
    edges: list[tuple[Any, ...]] = []
    for row in rows:
        within = (start is None or row[2] >= start) and (end is None or row[3] <= end)
        (inside if within else edges).append(row)
    total = sum(row[4] for row in rows)
    if total <= budget:
        level = RAW
    elif 2 * total // codec.FINE_BUCKET <= budget:
        level = FINE
    elif 2 * total // codec.COARSE_BUCKET <= budget:
        level = COARSE
    else:
        level = EXTREMES
    return _Plan(level=level, inside=inside, edges=edges)


def _source(plan: _Plan, row: tuple[Any, ...]) -> str:
    """Where one inside chunk's points come from (small chunks carry no rollups)."""
    count = row[4]
    if plan.level == EXTREMES:
        return EXTREMES
    if plan.level == COARSE and count >= 4 * codec.COARSE_BUCKET:
        return COARSE
    if plan.level in (FINE, COARSE) and count >= 4 * codec.FINE_BUCKET:
        return FINE
    return RAW


def _chunk_rows(
    series_ids: list[int], *, start: float | None, end: float | None
) -> dict[int, list[tuple[Any, ...]]]:
    """The chunks of these series that overlap [start, end], with their coarse rollups (small,
    and what long ranges read): one plain query, as the ORM's cost per row would dominate."""
    if not series_ids:
        return {}
    where, params = [_in("series_id", series_ids)], [_in_param(series_ids)]
    if start is not None:
        where.append("t_max >= %s")
        params.append(start)
    if end is not None:
        where.append("t_min <= %s")
        params.append(end)
    by_series: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(_CHUNK_COLUMNS)}, rollup_coarse FROM {Chunk._meta.db_table}"
            f" WHERE {' AND '.join(where)}",
            params,
        )
        for row in cursor.fetchall():
            by_series[row[1]].append(row)
    return by_series


def _fetch_blobs(plans: dict[int, _Plan]) -> dict[str, dict[int, bytes]]:
    wanted: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for plan in plans.values():
        for row in plan.inside:
            wanted[_source(plan, row)].append(row)
        wanted[RAW].extend(plan.edges)
    blobs: dict[str, dict[int, bytes]] = {
        COARSE: {row[0]: bytes(row[-1]) for row in wanted[COARSE]}
    }
    for column in (FINE, RAW):
        ids = [row[0] for row in wanted[column]]
        blobs[column] = {}
        for begin in range(0, len(ids), 10_000):
            part = ids[begin : begin + 10_000]
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT id, {column} FROM {Chunk._meta.db_table} WHERE {_in('id', part)}",
                    [_in_param(part)],
                )
                blobs[column].update(
                    (chunk_id, bytes(blob)) for chunk_id, blob in cursor.fetchall()
                )
    return blobs


def _in(column: str, values: list[int]) -> str:
    """`column IN (…)`; on PostgreSQL `= ANY(%s)` with one array parameter, which spares
    the client-side binding of thousands of placeholders."""
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s)"
    return f"{column} IN (SELECT value FROM json_each(%s))"


def _in_param(values: list[int]) -> object:
    return list(values) if connection.vendor == "postgresql" else json.dumps(values)


def _assemble(
    key: tuple[str, str],
    plan: _Plan,
    blobs: dict[str, dict[int, bytes]],
    *,
    start: float | None,
    end: float | None,
    points: int,
) -> SeriesPoints:
    pieces: list[tuple[np.ndarray, np.ndarray]] = []
    rollups: list[bytes] = []
    raw_count = 0
    for row in plan.inside:
        raw_count += row[4]
        source = _source(plan, row)
        if source == EXTREMES:
            pair = [(row[5], row[6]), (row[7], row[8])]
            pair.sort()
            pieces.append((np.array([p[0] for p in pair]), np.array([p[1] for p in pair])))
        elif source == RAW:
            pieces.append(codec.decode(blob=blobs[RAW][row[0]], count=row[4]))
        else:
            rollups.append(blobs[source][row[0]])
    if rollups:
        pieces.append(codec.unpack_points(rollups))
    for row in plan.edges:
        t, v = codec.decode(blob=blobs[RAW][row[0]], count=row[4])
        keep = np.ones(len(t), dtype=bool)
        if start is not None:
            keep &= t >= start
        if end is not None:
            keep &= t <= end
        raw_count += int(keep.sum())
        pieces.append((t[keep], v[keep]))
    t, v = _merge(pieces)
    t, v = downsample(t=t, v=v, points=points)
    return SeriesPoints(device=key[0], name=key[1], raw_count=raw_count, t=t, v=v)


def _merge(pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if not pieces:
        return np.empty(0), np.empty(0)
    t = np.concatenate([p[0] for p in pieces])
    v = np.concatenate([p[1] for p in pieces])
    if len(t) > 1 and not (np.diff(t) >= 0).all():
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    return t, v


def downsample(*, t: np.ndarray, v: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most `points` of (t, v), sorted by t, with MinMaxLTTB (extremes kept)."""
    if len(t) <= points:
        return t, v
    index = MinMaxLTTBDownsampler().downsample(
        np.ascontiguousarray(t), np.ascontiguousarray(v), n_out=points
    )
    return t[index], v[index]
