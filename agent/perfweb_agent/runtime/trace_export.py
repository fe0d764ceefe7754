"""A profiler window's segments, exported and merged into one gzip trace, on the agent thread.

Each segment is exported with Kineto's `export_chrome_trace` (which holds the GIL: the
thread pauses between two, EXPORT_PAUSE_RATIO times the last export, so that no step of the
script waits on several in a row), then the segments are merged in a helper process into
one trace with the time between them taken out (perfweb_agent.runtime.trace_merge). A trace
whose JSON passes 20 times `max_bytes`, or whose gzip passes `max_bytes`, is skipped
(fact `profiler.skipped_too_large`). The temporary files go whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from perfweb_agent.core.buffer import FactBuffer
from perfweb_agent.core.logger import say_once
from perfweb_agent.runtime.trace_merge import Segment, TraceTooLarge, merge_in_helper

# Between two segments' exports the agent thread waits this many times the last export's
# time (at least the minimum), so that no step of the script waits on several in a row.
EXPORT_PAUSE_RATIO = 3.0
EXPORT_PAUSE_MIN_S = 0.02


@dataclass(frozen=True, slots=True)
class Exported:
    """The merged trace's gzip bytes (None: skipped) and its JSON's size (None: too large
    to merge)."""

    data: bytes | None
    json_bytes: int | None


def export_window(
    segments: list[tuple[Any, float]], *, name: str, max_bytes: int, facts: FactBuffer
) -> Exported:
    """Export each (stopped profile, shift in s) of `segments`, merge them into the trace
    `name`, and release each profile's events as soon as it is exported."""
    exported: list[Segment] = []
    gz_path = _temporary(".json.gz")
    try:
        exporting = last = 0.0
        for index, (profile, shift_s) in enumerate(segments):
            if index:  # each export holds the GIL: let the script run between two
                time.sleep(max(EXPORT_PAUSE_MIN_S, EXPORT_PAUSE_RATIO * last))
            path = _temporary(".json")
            exported.append(Segment(path, shift_s * 1e6))
            began = time.perf_counter()
            profile.export_chrome_trace(path)
            last = time.perf_counter() - began
            exporting += last
            profile.kineto_results = None  # Kineto's copy of the events goes now
            profile._function_events = None
        segments.clear()
        facts.set("profiler.export_ms", round(exporting * 1000.0, 2))
        try:
            json_bytes = merge_in_helper(
                exported,
                gz_path,
                name=name,
                max_json_bytes=max_bytes * 20,  # ~10-20x in gzip
            )
        except TraceTooLarge:
            facts.set("profiler.skipped_too_large", name)
            return Exported(None, None)
        if os.path.getsize(gz_path) > max_bytes:
            say_once("trace-cap", "a trace over the %d-byte cap was skipped", max_bytes)
            facts.set("profiler.skipped_too_large", name)
            return Exported(None, json_bytes)
        with open(gz_path, "rb") as handle:
            return Exported(handle.read(), json_bytes)
    finally:
        for path in [s.path for s in exported] + [gz_path]:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _temporary(suffix: str) -> str:
    fd, path = tempfile.mkstemp(prefix="perf-agent-trace-", suffix=suffix)
    os.close(fd)
    return path
