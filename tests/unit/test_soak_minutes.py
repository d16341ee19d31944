"""The soak shape's per-minute arithmetic (benchmarks/soak_minutes.py): finishes land in the
minute they belong to, rates and claim-latency percentiles come out of each minute, the trend
reads the medians of the run's first and last sixth, which one noisy minute cannot swing, and the long-transaction ratio reads
the held minutes against the base minutes only."""

from __future__ import annotations

import datetime as dt

from benchmarks import soak_minutes
from benchmarks.soak_minutes import Minute

START = dt.datetime(2026, 12, 2, 6, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return START + dt.timedelta(seconds=seconds)


def test_bucket_puts_each_finish_in_its_minute_and_drops_those_outside() -> None:
    finishes = [at(-0.001), at(0), at(59.999), at(60), at(61), at(179.9), at(180), at(500)]
    minutes = soak_minutes.bucket(finishes, start=START, seconds=60, count=3)
    assert [m.finished for m in minutes] == [2, 2, 1]
    assert [m.index for m in minutes] == [0, 1, 2]
    assert minutes[1].rate == 2 / 60


def test_minute_of_reports_nearest_rank_percentiles_in_milliseconds() -> None:
    latencies = [n / 1000 for n in range(1, 101)]  # 1 ms .. 100 ms
    minute = soak_minutes.minute_of([at(1)] * 100, latencies, index=4, seconds=50)
    assert minute.index == 4
    assert minute.finished == 100
    assert minute.rate == 2.0
    assert minute.latency_p50_ms == 50.0
    assert minute.latency_p99_ms == 99.0


def test_an_empty_minute_has_no_percentiles_and_a_zero_rate() -> None:
    minute = soak_minutes.minute_of([], [], index=0, seconds=60)
    assert minute.rate == 0.0
    assert minute.latency_p50_ms is None
    assert minute.latency_p99_ms is None
    assert Minute(index=0, seconds=0, finished=5).rate == 0.0


def test_the_trend_reads_the_ends_medians_so_one_spike_cannot_swing_it() -> None:
    spiky_start = [40.0, 4000.0, 40.0, 40.0, 40.0, 40.0, 40.0, 40.0, 40.0, 40.0, 40.0, 44.0]
    assert soak_minutes.end_medians(spiky_start) == (2020.0, 42.0)
    flat_with_one_spike = [10.0, 10.0, 10.0] * 5 + [10.0, 10.0, 500.0]
    assert soak_minutes.end_medians(flat_with_one_spike) == (10.0, 10.0)
    assert soak_minutes.trend_ratio(flat_with_one_spike) == 1.0
    growing = [10.0 + 2 * n for n in range(12)]
    assert soak_minutes.end_medians(growing) == (11.0, 31.0)
    assert soak_minutes.trend_ratio(growing) > 2.8
    assert soak_minutes.end_medians([7.0]) == (7.0, 7.0)
    assert soak_minutes.trend_ratio([]) == 0.0


def test_held_ratios_compare_held_minutes_with_the_base_minutes_only() -> None:
    minutes = [
        Minute(index=0, seconds=60, finished=600),  # base: 10/s
        Minute(index=1, seconds=60, finished=480),  # held: 8/s
        Minute(index=2, seconds=60, finished=360),  # held: 6/s
        Minute(index=3, seconds=60, finished=1200),  # recovery: neither
    ]
    mean, worst, base = soak_minutes.held_ratios(minutes, held={1, 2}, base={0})
    assert (mean, worst, base) == (7.0, 6.0, 10.0)
    assert soak_minutes.ratio(worst, base) == 0.6
    assert soak_minutes.held_ratios(minutes, held=set(), base={0}) == (0.0, 0.0, 0.0)
    assert soak_minutes.ratio(1.0, 0.0) == 0.0
