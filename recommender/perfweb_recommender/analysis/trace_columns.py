"""What the operator and kernel tables keep of a Kineto trace, read a batch at a time.

The trace is streamed (`trace.stream`) and each batch decoded into small structs (typed
when the batch allows, about twice as fast), then added a category at a time: operators and
launches as packed columns for the nesting (`trace_tables`), the device time of each
correlation id, kernels and step markers counted as they pass.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from pathlib import Path
from typing import Any

import msgspec

from perfweb_recommender.errors import InputError
from perfweb_recommender.trace.loader import read_bytes
from perfweb_recommender.trace.stream import EventStream, NotStreamable

_OP_CATS = frozenset({"cpu_op", "Operator"})
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
_KERNEL_CATS = frozenset({"kernel", "Kernel"})
_DEVICE_CATS = _KERNEL_CATS | {"gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}


class _Args(msgspec.Struct, gc=False):
    correlation: Any = None


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    pid: Any = None
    tid: Any = None
    args: _Args | None = None


class _TypedArgs(msgspec.Struct, gc=False):
    correlation: int | None = None


class _TypedEvent(msgspec.Struct, gc=False):
    """`_Event` with the types a well-formed Kineto event has (most batches): decoded
    about twice as fast."""

    ph: str | None = None
    cat: str | None = None
    name: str = "None"
    ts: float | None = None
    dur: float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    args: _TypedArgs | None = None


class _Document(msgspec.Struct):
    traceEvents: list[msgspec.Raw]  # noqa: N815 - the format's key


_TYPED_BATCH = msgspec.json.Decoder(list[_TypedEvent])
_BATCH = msgspec.json.Decoder(list[_Event])
_DOCUMENT = msgspec.json.Decoder(_Document)
_EVENT = msgspec.json.Decoder(_Event)
OP, LAUNCH = 0, 1  # the kinds of the nested spans
_STEP_PREFIXES = ("ProfilerStep#", "Optimizer.step#")
_NUMERIC = {int, float}


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _correlation(event: _Event) -> int | None:
    value = event.args.correlation if event.args is not None else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


class Columns:
    """What the tables keep of a trace, read a batch at a time: operators and launches as
    packed columns (thread, start, duration, kind, and the op's name or the launch's
    place in `launch_corr`: 25 bytes a span, 8 more a launch), the device time of each
    correlation id (16 bytes an event), and kernels and step markers already counted."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.threads: dict[tuple[Any, Any], int] = {}
        self.thread, self.name = array("i"), array("i")
        self.ts, self.dur = array("d"), array("d")
        self.kind = array("b")
        self.launch_corr = array("q")
        self.device_corr, self.device_dur = array("q"), array("d")
        self.kernels: dict[str, list[float]] = {}
        self.step_names: set[str] = set()
        self.optimizer_steps = 0

    def add(self, events: list[_Event]) -> None:
        """One batch, a category at a time (a list comprehension per column, not a Python
        statement per event: this is most of the tables' time)."""
        by_cat: dict[str | None, list[_Event]] = defaultdict(list)
        for event in events:
            if event.ph == "X":
                cat = event.cat
                by_cat[cat if cat.__class__ is str else None].append(event)
        for cat, group in by_cat.items():
            ts, dur, group = _times(group)
            names = [n if n.__class__ is str else str(n) for n in (e.name for e in group)]
            for name in (n for n in names if n.startswith(_STEP_PREFIXES)):
                if name.startswith("ProfilerStep#"):
                    self.step_names.add(name)
                else:
                    self.optimizer_steps += 1
            if cat in _OP_CATS:
                ids, new_id = self.names, self.names.setdefault
                self._spans(group, ts, dur, OP, [new_id(n, len(ids)) for n in names])
            elif cat in _LAUNCH_CATS:
                corrs = [_correlation(e) for e in group]
                kept = [i for i, corr in enumerate(corrs) if corr is not None]
                first = len(self.launch_corr)
                self.launch_corr.extend(corrs[i] for i in kept)  # type: ignore[misc]
                self._spans(
                    [group[i] for i in kept],
                    [ts[i] for i in kept],
                    [dur[i] for i in kept],
                    LAUNCH,
                    range(first, first + len(kept)),
                )
            if cat in _DEVICE_CATS:
                corrs = [_correlation(e) for e in group]
                kept = [i for i, corr in enumerate(corrs) if corr]  # 0 is no correlation
                self.device_corr.extend(corrs[i] for i in kept)  # type: ignore[misc]
                self.device_dur.extend(dur[i] for i in kept)
                if cat in _KERNEL_CATS:
                    for name, length in zip(names, dur, strict=True):
                        entry = self.kernels.setdefault(name, [0, 0.0])
                        entry[0] += 1
                        entry[1] += length

    def _spans(
        self, group: list[_Event], ts: list[float], dur: list[float], kind: int, names: Any
    ) -> None:
        threads, new_id = self.threads, self.threads.setdefault
        before = len(self.thread)
        try:
            self.thread.extend(new_id((e.pid, e.tid), len(threads)) for e in group)
        except TypeError:  # a pid or tid that is a list or an object: its text names it
            del self.thread[before:]
            self.thread.extend(new_id(_thread_key(e), len(threads)) for e in group)
        self.ts.extend(ts)
        self.dur.extend(dur)
        self.kind.frombytes(bytes([kind]) * len(group))
        self.name.extend(names)


def _thread_key(event: _Event) -> tuple[Any, Any]:
    key = (event.pid, event.tid)
    try:
        hash(key)
    except TypeError:
        return (repr(event.pid), repr(event.tid))
    return key


def _times(group: list[_Event]) -> tuple[list[float], list[float], list[_Event]]:
    """(starts, durations clipped at 0, the events): those whose ts and dur are numbers."""
    ts, dur = [e.ts for e in group], [e.dur for e in group]
    if not set(map(type, ts)) <= _NUMERIC or not set(map(type, dur)) <= _NUMERIC:
        group = [e for e in group if _number(e.ts) is not None and _number(e.dur) is not None]
        ts, dur = [e.ts for e in group], [e.dur for e in group]
    return ts, [d if d > 0 else 0.0 for d in dur], group


def _decode(text: bytes) -> list[Any]:
    try:
        return _TYPED_BATCH.decode(text)
    except msgspec.ValidationError:
        return _BATCH.decode(text)


def read_columns(path: Path) -> Columns:
    columns = Columns()
    try:
        for batch in EventStream(path).batches(_decode):
            columns.add(batch)
    except NotStreamable:  # traceEvents not at the top of the first 64 MB: read it whole
        columns = Columns()
        try:
            for item in _DOCUMENT.decode(read_bytes(path)).traceEvents:
                columns.add([_EVENT.decode(item)])
        except msgspec.DecodeError as error:
            raise InputError(f"{path}: not a Kineto trace ({error})") from None
    return columns
