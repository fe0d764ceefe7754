"""Autoregressive calls of the primary module: does each call re-run the whole context?

A decoder without a KV cache is called once per generated token with the whole sequence so
far: its input's second dimension (the sequence) grows by one from call to call, and the
call's cost grows with it. A decoder with a cache is called with the new token only (the
length stays 1). For the calls whose input is exactly one position longer than the previous
call's, the fastest call seen at each length is kept (one number per length, at most
MAX_LENGTHS of them: a profiler window or a busy host only ever makes calls slower), and a
least-squares line through those fastest calls, duration against length, is reported as
facts every REPORT_EVERY such calls:

- `inference.growing_context_calls`: calls one position longer than the previous call;
- `inference.context_length_mean` / `inference.context_length_max`: the lengths seen;
- `inference.per_position_cost_s`: the slope, seconds per position of context;
- `inference.call_cost_at_zero_s`: the intercept, seconds of a call's fixed cost.
"""

from __future__ import annotations

from typing import Any

REPORT_EVERY = 16  # growing calls between two fact updates
MAX_LENGTHS = 4096  # context lengths remembered (bounded memory)


def context_length(args: tuple[Any, ...], kwargs: dict[str, Any], tensor: Any) -> int | None:
    """The second dimension of the call's first tensor input of two or more dimensions."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, tensor):
            return int(value.size(1)) if value.ndim >= 2 else None
    return None


class ContextGrowth:
    """The fastest call at each context length, for calls one position longer than the last."""

    def __init__(self, facts: Any) -> None:
        self.facts = facts  # a FactBuffer
        self.previous: int | None = None
        self.calls = 0
        self._fastest: dict[int, float] = {}  # length -> fastest call seen (s)

    def observe(self, length: int | None, seconds: float) -> None:
        """One eval call of the primary with input length `length`, taking `seconds`."""
        previous, self.previous = self.previous, length
        if length is None or previous is None or length != previous + 1:
            return
        fastest = self._fastest
        if length in fastest:
            fastest[length] = min(fastest[length], seconds)
        elif len(fastest) < MAX_LENGTHS:
            fastest[length] = seconds
        self.calls += 1
        if self.calls % REPORT_EVERY == 0:
            self._report()

    def _report(self) -> None:
        points = self._fastest
        n = len(points)
        sx = float(sum(points))
        sy = sum(points.values())
        sxx = float(sum(x * x for x in points))
        sxy = sum(x * y for x, y in points.items())
        spread = n * sxx - sx * sx
        if n < 2 or spread <= 0:
            return
        slope = (n * sxy - sx * sy) / spread
        self.facts.update(
            {
                "inference.growing_context_calls": self.calls,
                "inference.context_length_mean": round(sx / n, 2),
                "inference.context_length_max": max(points),
                "inference.per_position_cost_s": slope,
                "inference.call_cost_at_zero_s": (sy - slope * sx) / n,
            }
        )
