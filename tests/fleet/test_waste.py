"""fleet/waste.py: where a GPU's time went, from its samples."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from perfweb.fleet.conf import parse_prices, price_for
from perfweb.fleet.waste import core_hours, covered_durations, gpu_time
from perfweb_recommender.conditions import Series
from perfweb_recommender.thresholds import GIB


def every_second(values: list[float], start: float = 0.0) -> Series:
    return Series(t=[start + i for i in range(len(values))], v=values)


def test_each_sample_stands_for_the_time_to_the_next_one_or_the_usual_interval() -> None:
    import numpy as np

    covered = covered_durations(np.array([0.0, 1.0, 2.0, 30.0, 32.0]), 0.0, 40.0, 10.0)
    # after t=2 the agent went silent for 28 s: that sample stands for the usual 1.5 s
    assert covered.tolist() == [1.0, 1.0, 1.5, 2.0, 1.5]
    assert covered_durations(np.array([5.0]), 0.0, 5.5, 10.0).tolist() == [0.5]


def test_it_sorts_busy_low_and_idle_holding_memory_time() -> None:
    utilization = every_second([90.0] * 10 + [12.0] * 5 + [0.0] * 5)
    memory = every_second([8 * GIB] * 15 + [2 * GIB] * 5)
    time = gpu_time(utilization=utilization, memory=memory, energy=None, start=0.0, end=20.0)
    assert (time.busy, time.low_utilization, time.idle_holding_memory) == (10.0, 5.0, 5.0)
    assert time.unattributed == 0.0 and time.total == 20.0 and time.wasted == 10.0


def test_an_idle_gpu_without_memory_is_low_utilisation_not_holding() -> None:
    time = gpu_time(
        utilization=every_second([0.0] * 4),
        memory=every_second([0.2 * GIB] * 4),
        energy=None,
        start=0.0,
        end=4.0,
    )
    assert time.idle_holding_memory == 0.0 and time.low_utilization == 4.0


def test_time_no_sample_covers_is_unattributed_never_counted_as_busy_or_idle() -> None:
    # one minute of run, samples for the first 10 s only: the agent saw 10 s
    time = gpu_time(
        utilization=every_second([95.0] * 10), memory=None, energy=None, start=0.0, end=60.0
    )
    assert time.busy == 10.0 and time.unattributed == 50.0
    blind = gpu_time(utilization=Series(t=[], v=[]), memory=None, energy=None, start=0.0, end=60.0)
    assert blind.unattributed == 60.0 and blind.busy == blind.low_utilization == 0.0


def test_samples_outside_the_window_count_only_their_part_inside() -> None:
    time = gpu_time(
        utilization=every_second([50.0] * 100), memory=None, energy=None, start=10.5, end=20.0
    )
    assert time.busy == pytest.approx(9.5) and time.unattributed == pytest.approx(0.0)


def test_energy_comes_from_the_counter_s_increases_in_the_window() -> None:
    energy = Series(t=[0, 1, 2, 3, 4], v=[1000.0, 1600.0, 2200.0, 100.0, 700.0])  # reload at 3
    time = gpu_time(
        utilization=every_second([50.0] * 5), memory=None, energy=energy, start=0.0, end=5.0
    )
    assert time.energy_joules == 600 + 600 + 600
    one = gpu_time(
        utilization=every_second([50.0]),
        memory=None,
        energy=Series(t=[0], v=[5.0]),
        start=0.0,
        end=1.0,
    )
    assert one.energy_joules is None  # one reading says nothing


def test_core_hours_integrate_cpu_percent() -> None:
    two_cores_for_an_hour = Series(t=[float(i) for i in range(3600)], v=[200.0] * 3600)
    assert core_hours(cpu_percent=two_cores_for_an_hour, start=0, end=3600) == pytest.approx(2)


def test_prices_match_the_longest_model_name_inside_the_gpu_s_name() -> None:
    prices = parse_prices("H100=2.49, H100 80GB HBM3=3.10, A100=1.29, *=0.5")
    assert price_for("NVIDIA H100 80GB HBM3", prices) == 3.10
    assert price_for("NVIDIA A100-SXM4-40GB", prices) == 1.29
    assert price_for("Tesla V100", prices) == 0.5
    assert price_for("Tesla V100", parse_prices("H100=2")) is None


@pytest.mark.parametrize("bad", ["H100", "H100=cheap", "=2", "H100=-1", "H100=inf"])
def test_a_bad_price_setting_fails_loudly(bad: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="PERFWEB_GPU_PRICES"):
        parse_prices(bad)


def test_an_energy_reading_a_rounding_error_outside_the_span_still_counts() -> None:
    # the run's start comes back from the database rounded to the microsecond
    energy = Series(t=[99.9999996, 101.0, 102.0], v=[0.0, 10.0, 20.0])
    time = gpu_time(
        utilization=every_second([50.0] * 3, start=100.0),
        memory=None,
        energy=energy,
        start=100.0,
        end=103.0,
    )
    assert time.energy_joules == 20.0
