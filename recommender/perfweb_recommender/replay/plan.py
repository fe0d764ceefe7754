"""The replay plan: the run's own operator shapes, read from a profiler trace recorded with
`record_shapes` (the agent's windows do).

Pure: events in, a JSON-ready plan out. The plan lists, per case, the distinct shapes with
their call counts and the traced time (µs) the case took, next to the traced span (the loop's
operators and the gaps between them, a preemption's wait capped), so that a replayed
speed-up becomes a share of the run's time:

- `linear`: top-level `aten::linear` calls (input, weight, bias) in fp32;
- `conv`: top-level `aten::conv2d` calls (input, weight, bias, stride, padding, dilation,
  groups) in fp32;
- `attention`: hand-written attention, a matmul whose output feeds a softmax whose output
  feeds a matmul (q, k, v shapes; the time in those operators and the scaling between);
- `ops`: the top-level operator list in order (names, input dims, types, concrete scalar
  inputs), for the replay with and without autograd.
"""

from __future__ import annotations

import ast
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from perfweb_recommender.analysis.preemption import capped_calls, capped_gaps
from perfweb_recommender.trace.loader import read_bytes

if TYPE_CHECKING:
    from perfweb_recommender.analysis.summary import TraceSummary

FLOAT_TYPES = frozenset({"float"})
MAX_OPS = 2000  # top-level operators kept for the autograd replay (a window's first ones)
MATMULS = frozenset({"aten::matmul", "aten::bmm"})
SOFTMAX = frozenset({"aten::softmax", "aten::_softmax"})
SCALE_OPS = frozenset({"aten::div", "aten::mul", "aten::masked_fill", "aten::add", "aten::where"})


def plan_from_file(path: str | Path) -> dict[str, Any]:
    """The replay plan of one trace file; {} when it has no recorded shapes."""
    document = orjson.loads(bytes(read_bytes(Path(path))))
    events = document.get("traceEvents") if isinstance(document, dict) else None
    return plan_from_events(events or [])


def _top_level(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The CPU operators not nested in another one on their thread, in time order."""
    ops = [
        e
        for e in events
        if isinstance(e, dict)
        and e.get("cat") == "cpu_op"
        and e.get("ph") == "X"
        and isinstance(e.get("ts"), (int, float))
        and isinstance(e.get("dur"), (int, float))
    ]
    ops.sort(key=lambda e: (e.get("tid", 0), e["ts"], -e["dur"]))
    top: list[dict[str, Any]] = []
    ends: dict[Any, float] = {}
    for e in ops:
        tid = e.get("tid", 0)
        if e["ts"] >= ends.get(tid, float("-inf")):
            top.append(e)
            ends[tid] = e["ts"] + e["dur"]
    # the thread that ran most top-level operators: the loop's
    if not top:
        return []
    main = Counter(e.get("tid", 0) for e in top).most_common(1)[0][0]
    return sorted((e for e in top if e.get("tid", 0) == main), key=lambda e: e["ts"])


def _args(event: dict[str, Any]) -> tuple[list[Any], list[str], list[str]]:
    args = event.get("args") or {}
    dims = args.get("Input Dims") or []
    types = args.get("Input type") or []
    concrete = args.get("Concrete Inputs") or []
    return list(dims), [str(t) for t in types], [str(c) for c in concrete]


def _literal(text: str) -> Any:
    """A concrete input as Python ('[1, 1]' -> [1, 1], '0.' -> 0.0, 'False'); None if empty."""
    if text == "":
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _shape(value: Any) -> list[int] | None:
    if isinstance(value, list) and value and all(isinstance(d, int) and d > 0 for d in value):
        return value
    return None


def _linear(event: dict[str, Any]) -> tuple[Any, ...] | None:
    dims, types, _ = _args(event)
    if len(dims) < 2 or types[:2] != ["float", "float"]:
        return None
    x, w = _shape(dims[0]), _shape(dims[1])
    if x is None or w is None or len(w) != 2 or x[-1] != w[1]:
        return None
    bias = len(dims) > 2 and _shape(dims[2]) is not None
    return ("linear", tuple(x), tuple(w), bias)


def _conv(event: dict[str, Any]) -> tuple[Any, ...] | None:
    dims, types, concrete = _args(event)
    if len(dims) < 7 or types[:2] != ["float", "float"]:
        return None
    x, w = _shape(dims[0]), _shape(dims[1])
    if x is None or w is None or len(x) != 4 or len(w) != 4:
        return None
    values = [_literal(c) for c in concrete[3:7]]
    stride, padding, dilation, groups = values
    if not (isinstance(stride, list) and isinstance(dilation, list) and isinstance(groups, int)):
        return None
    if not isinstance(padding, (list, str)):
        return None
    bias = _shape(dims[2]) is not None
    return (
        "conv",
        tuple(x),
        tuple(w),
        bias,
        tuple(stride),
        tuple(padding) if isinstance(padding, list) else padding,
        tuple(dilation),
        groups,
    )


def _attention(
    top: list[dict[str, Any]], durations: list[float], i: int
) -> tuple[tuple[Any, ...], float] | None:
    """The hand-written attention whose softmax is top[i]: (key, traced µs) or None."""
    dims, types, _ = _args(top[i])
    scores = _shape(dims[0]) if dims and types[:1] == ["float"] else None
    if scores is None or len(scores) < 3:
        return None
    before = next(
        (j for j in range(i - 1, max(-1, i - 4), -1) if top[j].get("name") in MATMULS), None
    )
    # the matmul that takes the softmax's output, within the next few operators (a dropout
    # or another layer's call may come between)
    after = next(
        (
            j
            for j in range(i + 1, min(len(top), i + 4))
            if top[j].get("name") in MATMULS and _args(top[j])[0][:1] == [scores]
        ),
        None,
    )
    if before is None or after is None:
        return None
    if any(top[j].get("name") not in SCALE_OPS for j in range(before + 1, i)):
        return None
    q_dims, _, _ = _args(top[before])
    v_dims, _, _ = _args(top[after])
    if len(q_dims) < 2 or len(v_dims) < 2:
        return None
    q, kt = _shape(q_dims[0]), _shape(q_dims[1])
    v = _shape(v_dims[1])
    if q is None or kt is None or v is None or len(q) != len(scores) or len(v) != len(scores):
        return None
    if q[-2] != scores[-2] or kt[-1] != scores[-1] or v[-2] != scores[-1] or kt[-2] != q[-1]:
        return None
    k = [*kt[:-2], kt[-1], kt[-2]]
    if len(k) != len(q):
        return None
    us = sum(durations[j] for j in (*range(before, i + 1), after))
    return ("attention", tuple(q), tuple(k), tuple(v)), us


def _robust_durations(top: list[dict[str, Any]]) -> list[float]:
    """Each top-level operator's duration (µs), a preemption's wait taken out: capped at
    analysis.preemption's CALL_CAP times the fastest call of the same operator on the same
    input shapes."""
    keys = [f"{e.get('name')}{(e.get('args') or {}).get('Input Dims')}" for e in top]
    return capped_calls([float(e["dur"]) for e in top], keys)


def _robust_span(top: list[dict[str, Any]], durations: list[float]) -> float:
    """The loop's time over the window: its top-level operators (`_robust_durations`) plus
    the gaps between them, each capped (analysis.preemption.capped_gaps)."""
    gaps = [float(b["ts"]) - float(a["ts"] + a["dur"]) for a, b in zip(top, top[1:], strict=False)]
    return sum(durations) + sum(capped_gaps(gaps))


def plan_from_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The replay plan of a trace's events; {} when no operator has recorded shapes."""
    top = _top_level(events)
    if not top or not any((e.get("args") or {}).get("Input Dims") for e in top[:200]):
        return {}
    durations = _robust_durations(top)
    span = _robust_span(top, durations)
    calls: Counter[tuple[Any, ...]] = Counter()
    traced: dict[str, float] = defaultdict(float)
    for i, event in enumerate(top):
        name = event.get("name")
        key: tuple[Any, ...] | None = None
        us = 0.0
        if name == "aten::linear":
            key = _linear(event)
            us = durations[i]
        elif name == "aten::conv2d":
            key = _conv(event)
            us = durations[i]
        elif name in SOFTMAX:
            found = _attention(top, durations, i)
            if found is not None:
                key, us = found
        if key is not None:
            calls[key] += 1
            traced[key[0]] += us
    cases: dict[str, Any] = {}
    for key, count in calls.items():
        case = cases.setdefault(key[0], {"shapes": [], "traced_us": round(traced[key[0]], 3)})
        case["shapes"].append(_shape_row(key, count))
    ops = []
    for event in top[:MAX_OPS]:
        dims, types, concrete = _args(event)
        ops.append({"name": event.get("name"), "dims": dims, "types": types, "concrete": concrete})
    top_us = sum(durations)
    cases["ops"] = {
        "ops": ops,
        "traced_us": round(top_us * len(ops) / len(top), 3),
    }
    return {"span_us": round(span, 3), "top_level_ops": len(top), "cases": cases}


def _shape_row(key: tuple[Any, ...], count: int) -> dict[str, Any]:
    kind = key[0]
    if kind == "linear":
        return {"x": list(key[1]), "w": list(key[2]), "bias": key[3], "calls": count}
    if kind == "conv":
        padding = key[5] if isinstance(key[5], str) else list(key[5])
        return {
            "x": list(key[1]),
            "w": list(key[2]),
            "bias": key[3],
            "stride": list(key[4]),
            "padding": padding,
            "dilation": list(key[6]),
            "groups": key[7],
            "calls": count,
        }
    return {"q": list(key[1]), "k": list(key[2]), "v": list(key[3]), "calls": count}


PLAN_MAX_FILE_BYTES = 32 * 2**20  # a larger trace file is not parsed again for its shapes


def plan_for(summary: TraceSummary, path: str | Path) -> dict[str, Any]:
    """The replay plan of a trace file whose summary is `summary`: {} for a trace with GPU
    kernels, which the replay never times (it runs CPU operators only), so that its file is
    not parsed a second time for nothing (df_index_resolver: 0.4 s and 330 MiB)."""
    if summary.launch.get("kernels"):
        return {}
    return plan_or_empty(path)


def plan_or_empty(path: str | Path) -> dict[str, Any]:
    """`plan_from_file`, {} for a trace it cannot read (the analysis reports those) or one
    over PLAN_MAX_FILE_BYTES on disk (a whole-JSON parse of it could take GBs)."""
    try:
        if Path(path).stat().st_size > PLAN_MAX_FILE_BYTES:
            return {}
        return plan_from_file(path)
    except Exception:  # noqa: BLE001 - a replay plan is optional, never fails an analysis
        return {}
