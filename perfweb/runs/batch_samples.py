"""A batch body's numbers as `SampleBlock`s, checked whole: its metric series (from a parsed body,
or typed by msgspec's decode of a JSON one) and its step arrays. schemas.py reads the rest."""

from __future__ import annotations

from itertools import chain
from typing import Any

import msgspec
import numpy as np

from perfweb.runs.fields import (
    LATEST_TIME,
    Invalid,
    float64s,
    integer,
    numbers,
    obj,
    same_length,
    string,
    times,
)
from perfweb.runs.samples import SampleBlock, Samples
from perfweb_contract import protocol


class MetricSeries(msgspec.Struct, gc=False):
    """One series of a batch's metrics, as msgspec decodes it from JSON."""

    device: str
    name: str
    t: list[float] | bytes  # bytes: the packed form, decoded from base64 (fields.packed)
    v: list[float] | bytes


def metrics_block(value: Any) -> SampleBlock:
    """A parsed body's `metrics` as one block, each series' key and numbers checked."""
    if value is None:
        return SampleBlock.of([])
    if not isinstance(value, list):
        raise Invalid("metrics is not an array")
    if len(value) > protocol.SERIES_PER_BATCH_MAX:
        raise Invalid(f"metrics has more than {protocol.SERIES_PER_BATCH_MAX} entries")
    keys = [
        _series_key(obj(item, f"metrics[{i}]"), f"metrics[{i}].") for i, item in enumerate(value)
    ]
    arrays = [_series_numbers(item, i) for i, item in enumerate(value)]
    return SampleBlock.of(
        Samples(device=device, name=name, t=t, v=v)
        for (device, name), (t, v) in zip(keys, arrays, strict=True)
    )


_GOOD_KEYS: set[tuple[object, object]] = set()  # (device, name) pairs already validated
_GOOD_KEYS_MAX = 100_000


def _series_key(item: dict[str, Any], path: str) -> tuple[str, str]:
    # The same few hundred keys arrive in every batch: skip the regexes for known-good ones.
    key = (item.get("device"), item.get("name"))
    if type(key[0]) is str and type(key[1]) is str and key in _GOOD_KEYS:
        return key  # type: ignore[return-value]
    device = string(item, "device", path=path, pattern=protocol.DEVICE_RE)
    name = string(item, "name", path=path, pattern=protocol.METRIC_NAME_RE)
    assert device is not None and name is not None
    if len(_GOOD_KEYS) < _GOOD_KEYS_MAX:
        _GOOD_KEYS.add((device, name))
    return device, name


def typed_metrics(items: list[MetricSeries]) -> SampleBlock | None:
    """The decoded metrics as one block, their numbers checked for the whole batch at once;
    None when anything is off."""
    if len(items) > protocol.SERIES_PER_BATCH_MAX:
        return None
    try:
        keys = [(s.device, s.name) for s in items]  # strings: msgspec checked their types
        if not _GOOD_KEYS.issuperset(keys):
            keys = [_series_key({"device": d, "name": n}, "") for d, n in keys]
        t, t_lengths = _column([s.t for s in items])
        v, v_lengths = _column([s.v for s in items])
    except Invalid:
        return None
    if t_lengths != v_lengths:
        return None
    if not (np.isfinite(v).all() and ((t >= 0) & (t < LATEST_TIME)).all()):
        return None
    return SampleBlock(keys=keys, lengths=t_lengths, t=t, v=v)


def _column(arrays: list[list[float] | bytes]) -> tuple[np.ndarray, list[int]]:
    """One array for the batch's arrays of one kind (`t` or `v`) end to end, and their
    lengths. msgspec has already decoded packed ones from base64 (as strictly as
    fields.packed: padding required, nothing outside the alphabet)."""
    if all(type(a) is list for a in arrays):
        lengths = [len(a) for a in arrays]
        values = chain.from_iterable(arrays)
        return np.fromiter(values, np.float64, sum(lengths)), lengths
    blobs = [a for a in arrays if isinstance(a, bytes)]
    if len(blobs) == len(arrays):  # all packed (the agent's way): one frombuffer for all
        sizes = [len(blob) for blob in blobs]
        if any(size % 8 for size in sizes):
            raise Invalid("an array's bytes are not whole float64 values")
        return float64s(b"".join(blobs), ""), [size // 8 for size in sizes]
    parts = [np.array(a, np.float64) if isinstance(a, list) else float64s(a, "") for a in arrays]
    return np.concatenate(parts), [len(p) for p in parts]


def _series_numbers(item: dict[str, Any], i: int) -> tuple[np.ndarray, np.ndarray]:
    path = f"metrics[{i}]."
    t = times(item.get("t"), f"{path}t")
    v = numbers(item.get("v"), f"{path}v")
    same_length({"t": t, "v": v}, path)
    return t, v


def steps_block(steps: dict[str, Any]) -> tuple[SampleBlock, int]:
    """A body's `steps` arrays as the rank's step duration and data-wait series, and their
    count."""
    rank = integer(steps, "rank", path="steps.", minimum=0)
    arrays = {
        "index": numbers(steps.get("index"), "steps.index", integers=True),
        "t": times(steps.get("t"), "steps.t"),
        "duration": numbers(steps.get("duration"), "steps.duration"),
        "data_wait": numbers(steps.get("data_wait"), "steps.data_wait"),
    }
    count = same_length(arrays, "steps.")
    for name in ("index", "duration", "data_wait"):
        negative = arrays[name] < 0
        if negative.any():
            raise Invalid(f"steps.{name}[{int(np.argmax(negative))}] is negative")
    device = protocol.rank_device(rank)
    t = arrays["t"]
    return SampleBlock.of(
        [
            Samples(device=device, name=protocol.STEP_DURATION, t=t, v=arrays["duration"]),
            Samples(device=device, name=protocol.STEP_DATA_WAIT, t=t, v=arrays["data_wait"]),
        ]
    ), count
