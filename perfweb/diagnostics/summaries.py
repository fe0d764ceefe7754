"""A `TraceSummary` as JSON for the database and back, so a trace is analysed once.

The recommender's summary is a dataclass of numbers, dicts and one nested dataclass
(`Temporal`); `dataclasses.asdict` keeps every field at full precision (its `as_json` rounds
for display). JSON object keys become strings; the summaries key their dicts by names.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from perfweb_recommender.analysis.gpu_time import Temporal
from perfweb_recommender.analysis.summary import TraceSummary

FORMAT = 6  # bump when the stored shape changes: older summaries are analysed again
# 2: the operator and kernel tables (perfweb_recommender.analysis.trace_tables) stored beside it
# 3: the summary's compile markers, GPU-side step timeline, collectives, training flag and
#    CPU event count (issue 18)
# 4: module types' share of the traced time (perfweb_recommender.analysis.module_time, issue 19)
# 6: the replay plan, the run's recorded operator shapes (perfweb_recommender.replay, issue 32)


def summary_to_json(
    summary: TraceSummary, *, tables: dict[str, Any] | None = None
) -> dict[str, Any]:
    raw = orjson.dumps(
        dataclasses.asdict(summary), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    )
    return {"format": FORMAT, "summary": orjson.loads(raw), "tables": tables}


def summary_is_current(stored: dict[str, Any] | None) -> bool:
    return bool(stored) and stored.get("format") == FORMAT  # type: ignore[union-attr]


def summary_from_json(stored: dict[str, Any]) -> TraceSummary:
    fields = {f.name for f in dataclasses.fields(TraceSummary)}
    data = {k: v for k, v in stored["summary"].items() if k in fields}
    data["temporal"] = Temporal(**data["temporal"])
    capability = data.get("compute_capability")
    data["compute_capability"] = tuple(capability) if capability else None
    return TraceSummary(**data)
