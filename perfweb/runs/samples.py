"""A batch's samples as parsed: per-series float64 arrays, before they become chunks.

Pure data (numpy, no database): the batch schema (runs.schemas, its numbers read by
runs.batch_samples) produces them, the series app's chunks_prepare packs them, and the ingest
writer (perfweb.ingest) carries them from one to the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate

import numpy as np


@dataclass(frozen=True)
class Samples:
    """One series' samples from a batch: validated float64 arrays of equal length."""

    device: str
    name: str
    t: np.ndarray
    v: np.ndarray


@dataclass(frozen=True)
class SampleBlock:
    """Series end to end, as a batch brings them: series i is keys[i], and its samples are
    t[a:b], v[a:b], where a is the sum of the lengths before i and b = a + lengths[i]. A
    batch's hundred series stay one pair of arrays from parsing to packing, instead of a
    hundred Samples split off and joined again."""

    keys: list[tuple[str, str]]  # (device, name)
    lengths: list[int]
    t: np.ndarray
    v: np.ndarray

    @classmethod
    def of(cls, samples: Iterable[Samples]) -> SampleBlock:
        series = list(samples)
        if not series:
            return cls(keys=[], lengths=[], t=np.empty(0), v=np.empty(0))
        return cls(
            keys=[(s.device, s.name) for s in series],
            lengths=[len(s.t) for s in series],
            t=np.concatenate([s.t for s in series]),
            v=np.concatenate([s.v for s in series]),
        )

    def __add__(self, other: SampleBlock) -> SampleBlock:
        return SampleBlock(
            keys=self.keys + other.keys,
            lengths=self.lengths + other.lengths,
            t=np.concatenate((self.t, other.t)),
            v=np.concatenate((self.v, other.v)),
        )

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[Samples]:
        ends = accumulate(self.lengths)
        for (device, name), n, end in zip(self.keys, self.lengths, ends, strict=True):
            yield Samples(
                device=device, name=name, t=self.t[end - n : end], v=self.v[end - n : end]
            )

    @property
    def count(self) -> int:
        """How many samples, all series together."""
        return len(self.t)
