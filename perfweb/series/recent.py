"""Recent raw samples of many runs at once, for the alert evaluator and the fleet pages.

The evaluator reads a few minutes of a few metrics for every running run on every tick (and
a /metrics scrape the latest of every live run), so this reads the chunks of all of them in
two queries instead of one read per run and series, decoded by the chunk format's one codec.
The samples come back as the alert conditions' `Series` (perfweb_recommender.conditions).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np
from django.db.models import Max, Q

from perfweb.series import codec
from perfweb.series.models import Chunk
from perfweb.series.models import Series as SeriesRow
from perfweb_recommender.conditions import Series

SeriesKey = tuple[str, str]  # (device, metric name)


def recent_samples(
    *,
    run_ids: Iterable[int],
    names: Iterable[str],
    start: float,
    end: float,
    prefix: str = "",
) -> dict[int, dict[SeriesKey, Series]]:
    """{run id: {(device, name): samples with start <= t <= end, sorted by time}} of the
    series named in `names`, and of every series whose name starts with `prefix` if given
    (the script's own `scalar.*`, whose names only the run knows)."""
    named = Q(name__in=list(names))
    if prefix:
        named |= Q(name__startswith=prefix)
    rows = {row.id: row for row in SeriesRow.objects.filter(named, run_id__in=list(run_ids))}
    parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    chunks = Chunk.objects.filter(series_id__in=list(rows), t_max__gte=start, t_min__lte=end)
    for series_id, blob, count in chunks.values_list("series_id", "data", "count").iterator(
        chunk_size=2000
    ):
        parts[series_id].append(codec.decode(blob=bytes(blob), count=count))
    found: dict[int, dict[SeriesKey, Series]] = defaultdict(dict)
    for series_id, pieces in parts.items():
        t = np.concatenate([p[0] for p in pieces])
        v = np.concatenate([p[1] for p in pieces])
        keep = (t >= start) & (t <= end)
        t, v = t[keep], v[keep]
        if len(pieces) > 1:
            order = np.argsort(t, kind="stable")
            t, v = t[order], v[order]
        row = rows[series_id]
        found[row.run_id][(row.device, row.name)] = Series(t=t.tolist(), v=v.tolist())
    return found


def last_sample_times(*, run_ids: Iterable[int], name: str) -> dict[int, float]:
    """{run id: when its latest sample of `name` was taken (any device)}, in one query."""
    rows = (
        Chunk.objects.filter(series__run_id__in=list(run_ids), series__name=name)
        .values("series__run_id")
        .annotate(latest=Max("t_max"))
        .values_list("series__run_id", "latest")
    )
    return {run_id: float(latest) for run_id, latest in rows}


def first_samples(*, run_id: int, name: str, limit: int) -> list[float]:
    """The values of the run's first `limit` samples of `name` (all devices), by time."""
    t_all: list[np.ndarray] = []
    v_all: list[np.ndarray] = []
    chunks = Chunk.objects.filter(series__run_id=run_id, series__name=name).order_by("t_min")
    for blob, count in chunks.values_list("data", "count")[:8]:
        t, v = codec.decode(blob=bytes(blob), count=count)
        t_all.append(t)
        v_all.append(v)
        if sum(len(x) for x in t_all) >= limit:
            break
    if not t_all:
        return []
    t, v = np.concatenate(t_all), np.concatenate(v_all)
    return v[np.argsort(t, kind="stable")][:limit].tolist()
