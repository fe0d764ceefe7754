"""Compact sample storage: a series per (run, device, metric), its samples in chunks.

A row per sample costs 70–130 bytes with its indexes; a chunk holds up to
`codec.CHUNK_SAMPLES` samples packed and compressed (see codec.py), so the row and index
overhead is shared by thousands of samples. Each chunk also keeps summaries for wide reads:
its extremes and sum as columns and two min/max rollups as blobs, so that a read over a long
range touches O(points) data instead of O(samples).
"""

from __future__ import annotations

from django.db import models

from perfweb.runs.models import Run


class Series(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="series", db_index=False)
    device = models.CharField(max_length=32)
    name = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "device", "name"], name="series_unique")
        ]


class Chunk(models.Model):
    """Samples of one series, sorted by time: `data` holds all of them (codec.encode),
    `rollup_fine`/`rollup_coarse` the min and max of every 64/1024 (NULL while the chunk is
    too small for them to save anything)."""

    # db_index=False: the (series, t_min) index serves lookups by series too.
    series = models.ForeignKey(
        Series, on_delete=models.CASCADE, related_name="chunks", db_index=False
    )
    t_min = models.FloatField()
    t_max = models.FloatField()
    count = models.IntegerField()
    v_sum = models.FloatField()
    v_min = models.FloatField()
    v_max = models.FloatField()
    t_at_min = models.FloatField()
    t_at_max = models.FloatField()
    # Smallest first and `data` last: SQLite reads a row's columns in order, through the
    # overflow pages of any big blob before the one asked for.
    rollup_coarse = models.BinaryField(null=True)
    rollup_fine = models.BinaryField(null=True)
    data = models.BinaryField()

    class Meta:
        indexes = [models.Index(fields=["series", "t_min"], name="chunk_series_tmin")]
