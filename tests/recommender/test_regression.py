"""The cross-run regression verdict on synthetic step series: a real slowdown is flagged,
noise (independent or autocorrelated) is not, and the interval — not a fixed % — decides."""

from __future__ import annotations

import numpy as np
import pytest

from perfweb_recommender.analysis.regression import MIN_STEPS, median_ratio
from perfweb_recommender.compare import difference_sentence, facts_diff, findings_diff, speed_words
from perfweb_recommender.rules.cross_run import regression_finding


def _steps(rng: np.random.Generator, *, n: int, median_s: float, noise: float) -> list[float]:
    return list(median_s * np.exp(rng.normal(0.0, noise, size=n)))


def _ar1(rng: np.random.Generator, *, n: int, median_s: float, noise: float) -> list[float]:
    """Slow stretches that last: AR(1) log step times, correlation 0.9 step to step."""
    log = np.zeros(n)
    for i in range(1, n):
        log[i] = 0.9 * log[i - 1] + rng.normal(0.0, noise * np.sqrt(1 - 0.81))
    return list(median_s * np.exp(log))


def test_it_flags_a_real_ten_percent_regression() -> None:
    rng = np.random.default_rng(1)
    a = _steps(rng, n=300, median_s=0.035, noise=0.1)
    b = _steps(rng, n=300, median_s=0.0385, noise=0.1)
    verdict = median_ratio(a=a, b=b)
    assert verdict is not None
    assert verdict.regressed and not verdict.improved
    assert verdict.low < 1.10 < verdict.high
    assert verdict.ratio == pytest.approx(1.10, abs=0.03)


@pytest.mark.parametrize("seed", range(30))
def test_it_does_not_flag_noise(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    a = _steps(rng, n=300, median_s=0.035, noise=0.1)
    b = _steps(rng, n=300, median_s=0.035, noise=0.1)
    verdict = median_ratio(a=a, b=b)
    # About 1 in 20 such intervals misses 1.0 by chance; the +2 % floor keeps those quiet.
    assert verdict is not None and not verdict.regressed and not verdict.improved


@pytest.mark.parametrize("seed", range(10))
def test_it_does_not_flag_autocorrelated_noise(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    a = _ar1(rng, n=400, median_s=0.035, noise=0.1)
    b = _ar1(rng, n=400, median_s=0.035, noise=0.1)
    verdict = median_ratio(a=a, b=b)
    assert verdict is not None and not verdict.regressed


def test_its_interval_is_as_wide_as_the_runs_are_noisy_and_short() -> None:
    rng = np.random.default_rng(3)
    noisy = median_ratio(
        a=_steps(rng, n=25, median_s=0.035, noise=0.5),
        b=_steps(rng, n=25, median_s=0.0385, noise=0.5),
    )
    steady = median_ratio(
        a=_steps(rng, n=2000, median_s=0.035, noise=0.01),
        b=_steps(rng, n=2000, median_s=0.0385, noise=0.01),
    )
    assert noisy is not None and steady is not None
    assert noisy.high - noisy.low > 0.3  # a 10 % change cannot be told from this
    assert steady.high - steady.low < 0.01
    assert steady.low < 1.10 < steady.high


def test_it_flags_a_small_regression_when_the_runs_are_steady() -> None:
    rng = np.random.default_rng(4)
    a = _steps(rng, n=2000, median_s=0.035, noise=0.01)
    b = _steps(rng, n=2000, median_s=0.035 * 1.04, noise=0.01)
    verdict = median_ratio(a=a, b=b)
    assert verdict is not None and verdict.regressed  # 4 % with a ±0.1 % interval


def test_it_calls_a_faster_run_improved() -> None:
    rng = np.random.default_rng(5)
    verdict = median_ratio(
        a=_steps(rng, n=300, median_s=0.04, noise=0.1),
        b=_steps(rng, n=300, median_s=0.03, noise=0.1),
    )
    assert verdict is not None and verdict.improved and not verdict.regressed


def test_it_gives_no_verdict_on_too_few_steps() -> None:
    few = [0.03] * (MIN_STEPS - 1)
    assert median_ratio(a=few, b=[0.03] * 100) is None
    assert median_ratio(a=[0.03] * 100, b=[0.03, float("nan")] * MIN_STEPS) is not None


def test_it_gives_the_same_verdict_every_time() -> None:
    rng = np.random.default_rng(6)
    a, b = (
        _steps(rng, n=500, median_s=0.03, noise=0.2),
        _steps(rng, n=500, median_s=0.031, noise=0.2),
    )
    assert median_ratio(a=a, b=b) == median_ratio(a=a, b=b)


def test_it_says_in_one_sentence_what_made_b_slower() -> None:
    rng = np.random.default_rng(7)
    a = _steps(rng, n=300, median_s=0.060, noise=0.02)
    b = _steps(rng, n=300, median_s=0.074, noise=0.02)
    verdict = median_ratio(a=a, b=b)
    assert verdict is not None
    delta_ms = 1000 * (verdict.b_median - verdict.a_median)
    operators = [
        {"name": "aten::copy_", "delta_us": 0.7 * delta_ms * 1000},
        {"name": "aten::mm", "delta_us": -500.0},  # got faster: not a cause of the slowdown
        {"name": "aten::add_", "delta_us": 50.0},
    ]
    sentence = difference_sentence(
        ratio=verdict, wait_delta_s=0.2 * delta_ms / 1000, operators=operators
    )
    assert sentence.startswith(
        f"B's median step is {100 * (verdict.ratio - 1):.0f}% slower than A's"
    )
    assert f"`aten::copy_` (+{0.7 * delta_ms:.3g} ms)" in sentence
    assert f"the DataLoader wait (+{0.2 * delta_ms:.3g} ms)" in sentence
    assert "; 90% of the difference is" in sentence
    assert "aten::mm" not in sentence and "aten::add_" not in sentence


def test_it_says_when_two_runs_do_not_differ() -> None:
    rng = np.random.default_rng(8)
    verdict = median_ratio(
        a=_steps(rng, n=300, median_s=0.05, noise=0.1),
        b=_steps(rng, n=300, median_s=0.05, noise=0.1),
    )
    assert verdict is not None
    assert "does not differ from A's" in difference_sentence(ratio=verdict)


def test_it_lists_the_facts_that_differ_and_the_findings_that_moved() -> None:
    a = {"dataloader.0.num_workers": 0, "torch.num_threads": 4, "process.pid": 10}
    b = {"dataloader.0.num_workers": 4, "torch.num_threads": 4, "process.pid": 11, "amp": True}
    assert facts_diff(a, b) == [
        {"key": "amp", "a": None, "b": True},
        {"key": "dataloader.0.num_workers", "a": 0, "b": 4},
    ]
    moved = findings_diff(["dataloader.num_workers", "cpu.threads"], ["cpu.threads", "x.y"])
    assert moved == {
        "appeared": ["x.y"],
        "disappeared": ["dataloader.num_workers"],
        "both": ["cpu.threads"],
    }


def test_it_builds_the_regression_finding_only_for_a_regression() -> None:
    rng = np.random.default_rng(9)
    a = _steps(rng, n=300, median_s=0.035, noise=0.1)
    slower = median_ratio(a=a, b=_steps(rng, n=300, median_s=0.0385, noise=0.1))
    same = median_ratio(a=a, b=_steps(rng, n=300, median_s=0.035, noise=0.1))
    assert slower is not None and same is not None
    found = regression_finding(
        verdict=slower, baseline_run="a" * 32, compare_path="/compare/?run=x", sentence="B."
    )
    assert found is not None and found.id == "run.regression"
    assert found.title.startswith("Regressed vs run aaaaaaaaaaaa")
    assert found.doc.startswith("What: ") and "\n\nWhy: " in found.doc and "\n\nFix: " in found.doc
    assert "/compare/?run=x" in found.fix.text
    assert regression_finding(verdict=same, baseline_run="a", compare_path="", sentence="") is None


def test_it_quotes_no_share_when_the_profiled_steps_explain_more_than_the_difference() -> None:
    rng = np.random.default_rng(10)
    verdict = median_ratio(
        a=_steps(rng, n=300, median_s=0.060, noise=0.02),
        b=_steps(rng, n=300, median_s=0.070, noise=0.02),
    )
    assert verdict is not None
    sentence = difference_sentence(
        ratio=verdict, operators=[{"name": "aten::mm", "delta_us": 50e3}]
    )
    assert "% of the difference" not in sentence
    assert sentence.endswith("per step, the profiled windows differ most in `aten::mm` (+50 ms).")


@pytest.mark.parametrize(
    ("ratio", "words"),
    [
        (0.2, "5× faster (80% less time)"),
        (0.5, "2× faster (50% less time)"),
        (0.9, "1.1× faster (10% less time)"),
        (1.23, "23% slower"),
        (2.5, "2.5× slower (2.5× the time)"),
    ],
)
def test_it_says_a_speed_up_as_a_speed_up(ratio: float, words: str) -> None:
    assert speed_words(ratio) == words
