"""Compact sample storage: lossless packing, exact counts through compaction, and reads that
keep extremes at every level of detail.

Runs against SQLite here and against PostgreSQL through test_postgresql.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from perfweb.runs.models import Run
from perfweb.runs.samples import Samples
from perfweb.series import codec, services
from perfweb.series.models import Chunk, Series
from perfweb.series.selectors import series_read, series_span
from perfweb.series.services import series_append, series_compact

from .agent_client import T0, Agent


def realistic(n: int, *, seed: int = 0, step: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = T0 + np.arange(n) * step + rng.normal(0, step / 1000, n)
    v = np.clip(np.round(60 + np.cumsum(rng.normal(0, 2, n))), 0, 100)
    return t, v


@pytest.mark.parametrize(
    "values",
    [
        [97.0, 95.0, 95.0, 0.0],  # utilisation
        [312.457, 311.002, 299.999, 300.0],  # watts in mW steps
        [85520809984.0, 8.5e10 + 4096, 1.0, 2.0],  # bytes
        [0.1 + 0.2, np.pi, -np.e, 1e-300],  # not decimals: XORed
        [1e300, -1e300, 5e-324, 0.5],
    ],
)
def test_it_packs_samples_losslessly(values: list[float]) -> None:
    t = np.array([T0 + 0.000000119, T0 + 0.5, T0 + 1.123456789, T0 + 2.0])
    v = np.array(values)
    for blob in (codec.encode(t=t, v=v), codec.encode_plain(t=t, v=v)):
        decoded_t, decoded_v = codec.decode(blob=blob, count=4)
        assert decoded_t.tobytes() == t.tobytes()
        assert decoded_v.tobytes() == v.tobytes()


@pytest.mark.parametrize(
    "t",
    [
        [T0, T0 + 1023.9, T0 + 1023.9 + 1e-6],  # within 2^32 steps of the first: offsets
        [T0, T0 + 1024.5],  # beyond: float64 times
        [-0.0, 0.0, 1e-300, 1.0],  # -0.0's bits are negative: float64 times
        [0.0, 5e-324, 1e-310],  # subnormals
    ],
)
def test_it_keeps_ingest_times_exact_whichever_layout_they_take(t: list[float]) -> None:
    times = np.array(t)
    blob = codec.encode_plain(t=times, v=np.arange(len(t), dtype=np.float64))
    decoded_t, _ = codec.decode(blob=blob, count=len(t))
    assert decoded_t.tobytes() == times.tobytes()


def test_it_stores_ingest_times_in_four_bytes_when_they_fit() -> None:
    t, v = realistic(50, step=0.1)
    assert len(codec.encode_plain(t=t, v=v)) == 2 + 8 + 4 * 50 + 4 * 50  # float32 values
    late = t + np.where(np.arange(50) < 25, 0.0, 2000.0)
    assert len(codec.encode_plain(t=late, v=v)) == 2 + 8 * 50 + 4 * 50


def test_it_still_reads_ingest_chunks_with_float64_times() -> None:
    t, v = realistic(5)
    for single, values in ((False, v.tobytes()), (True, v.astype("<f4").tobytes())):
        blob = codec.plain(t.tobytes(), values, single=single)
        decoded_t, decoded_v = codec.decode(blob=blob, count=5)
        assert decoded_t.tobytes() == t.tobytes() and decoded_v.tobytes() == v.tobytes()


def test_a_batch_packs_each_series_as_it_would_alone() -> None:
    rng = np.random.default_rng(3)
    t, v = realistic(40, step=0.1)
    series = [
        Samples(device="gpu:0", name="gpu.utilization", t=t, v=v),
        Samples(device="gpu:0", name="gpu.power", t=t, v=v + 0.1),  # float64 values
        Samples(device="gpu:1", name="gpu.power", t=t[::-1] + 5000.0, v=v),  # unsorted, late
        Samples(device="gpu:2", name="gpu.power", t=np.array([T0, T0 + 3000.0]), v=v[:2]),
        Samples(device="gpu:3", name="gpu.power", t=np.array([]), v=np.array([])),
        Samples(device="process", name="process.rss", t=t[:7], v=rng.normal(8e9, 1e7, 7)),
    ]
    prepared = services.chunks_prepare(samples=series)
    alone = [s for s in series if len(s.t)]
    assert [(c.device, c.name) for c in prepared] == [(s.device, s.name) for s in alone]
    for chunk, s in zip(prepared, alone, strict=True):
        order = np.argsort(s.t, kind="stable")
        expected = services.chunk_columns(t=s.t, v=s.v)
        assert chunk.columns[3] == pytest.approx(expected[3], rel=1e-12)  # v_sum: order
        assert chunk.columns[:3] + chunk.columns[4:] == expected[:3] + expected[4:]
        assert chunk.columns[8] == codec.encode_plain(t=s.t[order], v=s.v[order])
    # The parser's form, one block for the batch, packs alike and splits back into the series.
    block = services.SampleBlock.of(series[:3]) + services.SampleBlock.of(series[3:])
    assert services.chunks_prepare(samples=block) == prepared
    assert [(s.device, s.name, s.t.tolist(), s.v.tolist()) for s in block] == [
        (s.device, s.name, s.t.tolist(), s.v.tolist()) for s in series
    ]


def test_it_packs_a_realistic_series_small() -> None:
    t, v = realistic(codec.CHUNK_SAMPLES)
    assert len(codec.encode(t=t, v=v)) / len(t) < 4  # bytes per sample, times included


@pytest.fixture
def series_run(started: Agent) -> Run:
    return Run.objects.get()


def append_in_batches(run: Run, t: np.ndarray, v: np.ndarray, *, per_batch: int) -> None:
    for i in range(0, len(t), per_batch):
        piece = Samples(
            device="gpu:0", name="gpu.utilization", t=t[i : i + per_batch], v=v[i : i + per_batch]
        )
        series_append(run=run, samples=[piece])


@pytest.mark.django_db
def test_it_compacts_small_chunks_keeping_every_sample(series_run: Run) -> None:
    t, v = realistic(20_000)
    append_in_batches(series_run, t, v, per_batch=500)
    series = Series.objects.get()
    assert Chunk.objects.count() == 40
    assert series_compact(series_id=series.id) == 40
    assert sorted(Chunk.objects.values_list("count", flat=True)) == [3616, 8192, 8192]
    [read] = series_read(run=series_run, points=100_000)
    assert read.raw_count == 20_000 and not read.downsampled
    assert read.t.tobytes() == t.tobytes() and read.v.tobytes() == v.tobytes()


@pytest.mark.django_db
def test_it_compacts_again_only_what_is_new(series_run: Run) -> None:
    t, v = realistic(10_000)
    append_in_batches(series_run, t[:9000], v[:9000], per_batch=1000)
    series = Series.objects.get()
    series_compact(series_id=series.id)
    assert series_compact(series_id=series.id) == 0  # nothing small and unpacked is left
    append_in_batches(series_run, t[9000:], v[9000:], per_batch=500)
    assert series_compact(series_id=series.id) == 3  # the remainder and two new chunks
    assert series_span(run=series_run)[0]["count"] == 10_000


@pytest.mark.django_db
def test_it_merges_late_samples_in_time_order(series_run: Run) -> None:
    t, v = realistic(3000)
    order = np.random.default_rng(1).permutation(3000)
    append_in_batches(series_run, t[order], v[order], per_batch=300)
    series_compact(series_id=Series.objects.get().id)
    [read] = series_read(run=series_run, points=10_000)
    assert read.t.tolist() == t.tolist() and read.v.tolist() == v.tolist()


@pytest.fixture
def long_series(series_run: Run) -> tuple[np.ndarray, np.ndarray]:
    t, v = realistic(300_000, seed=2)
    v[123_457] = 1000.0  # one spike and one dip that every level must keep
    v[234_567] = -1000.0
    append_in_batches(series_run, t, v, per_batch=50_000)
    series_compact(series_id=Series.objects.get().id)
    return t, v


@pytest.mark.django_db
@pytest.mark.parametrize("points", [50, 500, 5000, 20_000])
def test_it_keeps_the_extremes_at_every_level_of_detail(
    series_run: Run, long_series: tuple[np.ndarray, np.ndarray], points: int
) -> None:
    t, v = long_series
    [read] = series_read(run=series_run, points=points)
    assert read.raw_count == len(t)
    assert read.downsampled and len(read.t) <= points
    assert read.v.max() == 1000.0 and read.t[read.v.argmax()] == t[123_457]
    assert read.v.min() == -1000.0 and read.t[read.v.argmin()] == t[234_567]
    assert (np.diff(read.t) >= 0).all()
    assert set(read.t.tolist()) <= set(t.tolist())  # real samples, never invented


@pytest.mark.django_db
@pytest.mark.parametrize("points", [100, 100_000])
def test_it_counts_a_time_range_exactly(
    series_run: Run, long_series: tuple[np.ndarray, np.ndarray], points: int
) -> None:
    t, _ = long_series
    start, end = T0 + 10_000.5, T0 + 250_000.5  # mid-chunk at both ends
    [read] = series_read(run=series_run, start=start, end=end, points=points)
    assert read.raw_count == int(((t >= start) & (t <= end)).sum())
    assert read.t.min() >= start and read.t.max() <= end
    assert read.v.max() == 1000.0 and read.v.min() == -1000.0


@pytest.mark.django_db
def test_it_reads_only_the_series_asked_for(started: Agent) -> None:
    started.batch()
    run = Run.objects.get()
    assert [s.name for s in series_read(run=run, names=["process.rss"])] == ["process.rss"]
    assert [s.device for s in series_read(run=run, devices=["rank:0"])] == ["rank:0", "rank:0"]
    assert series_read(run=run, start=T0 + 100) == []


@pytest.mark.django_db
def test_it_compacts_recently_active_runs_on_the_beat(started: Agent) -> None:
    from perfweb.series.tasks import compact_recent_runs_task

    for _ in range(3):
        started.batch()
    assert Chunk.objects.count() == 12
    compact_recent_runs_task()
    assert Chunk.objects.count() == 4
    assert sorted(Chunk.objects.values_list("count", flat=True)) == [6, 6, 30, 30]


@pytest.mark.django_db
def test_it_changes_nothing_when_another_compaction_got_there_first(
    series_run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    t, v = realistic(3000)
    append_in_batches(series_run, t, v, per_batch=1000)
    real_chunk_columns = services.chunk_columns

    def meanwhile_another_compaction_takes_one(**kwargs: Any) -> tuple[object, ...]:
        taken = Chunk.objects.order_by("id").first()
        if taken is not None and taken.count == 1000:
            taken.delete()
        return real_chunk_columns(**kwargs)

    monkeypatch.setattr(services, "chunk_columns", meanwhile_another_compaction_takes_one)
    assert series_compact(series_id=Series.objects.get().id) == 0
    assert sorted(Chunk.objects.values_list("count", flat=True)) == [1000, 1000]
