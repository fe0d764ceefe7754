"""The maths of an A/B measurement: Student's t, the trimmed mean and an always-valid
interval. Plain functions of numbers; nothing here knows what an arm or a verdict is."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# The widest interval half-width reported, in log speedup: JSON has no infinity, and e^50 is
# wide enough to say "unbounded".
MAX_LOG_HALF_WIDTH = 50.0


def quantile(ordered: Sequence[float], q: float) -> float:
    """The `q` quantile of sorted values, by linear interpolation."""
    position = q * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def trimmed_mean(values: Sequence[float], trim: float) -> float:
    """The mean of `values` without the lowest and the highest `trim` share of them."""
    ordered = sorted(values)
    cut = int(trim * len(ordered))
    kept = ordered[cut : len(ordered) - cut] or ordered
    return statistics.fmean(kept)


def trimmed_log_variance(values: Sequence[float], trim: float) -> float:
    """The variance of the log of `trimmed_mean(values, trim)` from the values' own spread:
    the winsorized variance over (1 - 2 trim)² k (Tukey and McLaughlin), divided by the
    trimmed mean squared (delta method); 0 for fewer than 2 values."""
    if len(values) < 2:
        return 0.0
    ordered = sorted(values)
    cut = int(trim * len(ordered))
    low, high = ordered[cut], ordered[len(ordered) - 1 - cut]
    winsorized = [min(max(x, low), high) for x in ordered]
    kept_share = (len(ordered) - 2 * cut) / len(ordered)
    centre = trimmed_mean(ordered, trim)
    if centre <= 0:
        return 0.0
    spread = statistics.variance(winsorized) / (kept_share**2 * len(ordered))
    return spread / (centre * centre)


def median_log_variance(values: Sequence[float]) -> float:
    """The variance of the log of the median of `values` from their own spread: the standard
    error of a median from the quantiles at 1/2 ± 1/(2√k) (half their distance: the
    sectioning estimate of 1/(2 f(m) √k)), over the median squared; 0 for fewer than 2."""
    if len(values) < 2:
        return 0.0
    ordered = sorted(values)
    step = 0.5 / math.sqrt(len(ordered))
    error = (quantile(ordered, 0.5 + step) - quantile(ordered, 0.5 - step)) / 2.0
    centre = statistics.median(ordered)
    return (error / centre) ** 2 if centre > 0 else 0.0


def mixture_half_width(*, n: int, sum_squares: float, alpha: float, scale: float) -> float:
    """Half-width around the mean of n observations of an always-valid (1 - alpha) interval
    of their mean, for Gaussian observations of unknown variance.

    The interval is {mu : M_n(mu) < 1/alpha}, M_n the scale-invariant mixture likelihood
    ratio of Lai (1976): the drift mu is mixed over N(0, (scale·sigma)²), sigma over the
    right Haar measure dsigma/sigma, which gives

        M_n(mu) = (1 + n c²)^(-1/2) · (1 - S² / ((n + 1/c²) V))^(-n/2)

    with S and V the sum and the sum of squares of x - mu, c = `scale`. M_n is a
    nonnegative martingale under mu (Lai 1976; Wang & Ramdas 2023), so by Ville's
    inequality the interval covers mu at every n at once with probability 1 - alpha:
    looking after each round and stopping when it decides costs nothing more. Solved for
    mu it is mean ± the value returned. `sum_squares`: the sum of squared deviations from
    the mean. MAX_LOG_HALF_WIDTH where the interval is unbounded (n < 2 or too few rounds
    for this alpha).
    """
    if n < 2:
        return MAX_LOG_HALF_WIDTH
    c2 = scale * scale
    h = 1.0 - (alpha * alpha / (1.0 + n * c2)) ** (1.0 / n)
    a = n + 1.0 / c2
    room = n * n - h * n * a
    if room <= 0:
        return MAX_LOG_HALF_WIDTH
    return min(math.sqrt(h * a * max(sum_squares, 0.0) / room), MAX_LOG_HALF_WIDTH)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: the t with P(T <= t) = p for `df` degrees of freedom (p >= 0.5)."""
    if not 0.5 <= p < 1.0 or df < 1:
        raise ValueError("t_quantile needs 0.5 <= p < 1 and df >= 1")
    tail = 1.0 - p
    low, high = 0.0, 1.0
    while _t_upper_tail(high, df) > tail:
        low, high = high, high * 2.0
    for _ in range(200):  # bisection: the tail falls monotonically in t
        middle = (low + high) / 2.0
        if _t_upper_tail(middle, df) > tail:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * high:
            break
    return (low + high) / 2.0


def _t_upper_tail(t: float, df: int) -> float:
    """P(T > t) for t >= 0: half the regularized incomplete beta I_{df/(df+t²)}(df/2, 1/2)."""
    return 0.5 * incomplete_beta(df / (df + t * t), df / 2.0, 0.5)


def incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction
    (evaluated with the modified Lentz method; the symmetry I_x(a, b) = 1 - I_{1-x}(b, a)
    keeps x on the side where the fraction converges fast)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - incomplete_beta(1.0 - x, b, a)
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return math.exp(log_front) * fraction / a
