"""Rules about autoregressive generation (one call of the model per new token)."""

from __future__ import annotations

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.inference import is_inference
from perfweb_recommender.rules.signals import numeric_fact

GROWING_CALLS_MIN = 16  # calls whose input grew by one position: a decoding loop
CONTEXT_GROWTH_MIN = 1.2  # a call at the mean context costs this many times a 1-position call


def _context_fit(evidence: RunEvidence) -> tuple[float, float, float, float] | None:
    """(growing calls, seconds per position, seconds at zero, mean length) from the facts,
    None unless the agent saw a decoding loop of at least GROWING_CALLS_MIN calls."""
    keys = (
        "inference.growing_context_calls",
        "inference.per_position_cost_s",
        "inference.call_cost_at_zero_s",
        "inference.context_length_mean",
    )
    values = [numeric_fact(evidence, key) for key in keys]
    numbers = [v for v in values if v is not None]
    if len(numbers) < len(keys) or numbers[0] < GROWING_CALLS_MIN:
        return None
    return numbers[0], numbers[1], numbers[2], numbers[3]


@rule("inference.kv_cache", risk="operator")
def inference_kv_cache(evidence: RunEvidence) -> Finding | None:
    """What: autoregressive generation whose cost per token grows with the sequence length:
    each new token calls the model on the whole context again.

    Why: without a cache of the attention keys and values, the model recomputes every
    earlier position for each new token — the work of a sequence grows with its square.
    With a KV cache each call processes the new token only.

    In a training run the decoding is an evaluation between the steps (a trainer's callback
    that samples): the gain is what the cache saves of the whole run's step time, not of one
    decoding call.

    Fix: cache keys and values: `use_cache=True` for Hugging Face `generate`; in a
    hand-written decoder keep each layer's past keys and values and call the model with the
    new token only.
    """
    fit = _context_fit(evidence)
    if fit is None:
        return None
    calls, slope, at_zero, length = fit
    fixed = max(0.0, at_zero)
    now = fixed + slope * length  # the mean call, re-running the whole context
    cached = fixed + slope  # one new position per call
    if slope <= 0 or cached <= 0 or now < CONTEXT_GROWTH_MIN * cached:
        return None
    gain, share = 1 - cached / now, ""
    if not is_inference(evidence):  # an evaluation's decoding between training steps
        steps_s = sum(step.duration_s for step in evidence.steps)
        saved_s = calls * (now - cached)
        gain = min(gain, saved_s / steps_s) if steps_s > 0 else 0.0
        share = (
            f"; in a training run: {saved_s:.2f} s saved of its {steps_s:.2f} s of steps "
            "(the decoding is an evaluation between them)"
        )
    return finding(
        "inference.kv_cache",
        title=f"Each generated token re-runs the whole context (mean {length:.0f} positions): "
        f"a call costs {now * 1e3:.2f} ms, {now / cached:.1f}x a one-token call",
        confidence=0.7,
        gain=gain,
        basis=f"measured: a line through the fastest of {calls:g} decoding calls at each "
        f"context length ({slope * 1e6:.1f} µs per position + {fixed * 1e3:.2f} ms); with a "
        f"cache each call costs its one-position value{share}",
        evidence=[
            Evidence("decoding calls one position longer than the last", calls, "calls", "facts"),
            Evidence("mean context length", length, "positions", "facts"),
            Evidence(
                "longest context",
                numeric_fact(evidence, "inference.context_length_max") or 0,
                "positions",
                "facts",
            ),
            Evidence("cost per position of context", round(slope * 1e6, 2), "µs", "facts"),
            Evidence("fixed cost per call", round(fixed * 1e3, 3), "ms", "facts"),
        ],
        fix=Fix(
            text="Cache the attention keys and values and feed the model only the new token "
            "at each decoding step.",
            snippet="# Hugging Face\n"
            "model.generate(input_ids, max_new_tokens=n, use_cache=True)\n"
            "# a hand-written decoder: each layer keeps its past k, v\n"
            "k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)\n"
            "logits = model(next_token, past_key_values=cache)",
        ),
    )
