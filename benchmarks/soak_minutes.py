"""The per-minute arithmetic of the soak shape (p), apart from Django so a unit test can check
it: which minute each finished job falls in, each minute's rate and claim-latency percentiles,
and the ratios the targets read (last minute against the first, the medians of the first
and last sixth of the run, the minutes a
long transaction was open against the minutes it was not).
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def nearest_rank(samples: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile; None for no samples (a minute nothing finished in)."""
    if not samples:
        return None
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Minute:
    """One window of the run: the jobs that finished in it and their claim latencies."""

    index: int
    seconds: float
    finished: int
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None

    @property
    def rate(self) -> float:
        return self.finished / self.seconds if self.seconds > 0 else 0.0


def minute_of(
    finished_at: Sequence[dt.datetime],
    latencies_s: Sequence[float] | None,
    *,
    index: int,
    seconds: float,
) -> Minute:
    """The Minute of the jobs that finished in one window (their latencies optional)."""
    lat_ms = [value * 1000 for value in latencies_s] if latencies_s is not None else []
    return Minute(
        index=index,
        seconds=seconds,
        finished=len(finished_at),
        latency_p50_ms=nearest_rank(lat_ms, 50),
        latency_p99_ms=nearest_rank(lat_ms, 99),
    )


def bucket(
    finished_at: Sequence[dt.datetime], *, start: dt.datetime, seconds: float, count: int
) -> list[Minute]:
    """Split finish times into ``count`` consecutive windows of ``seconds`` from ``start``;
    finishes before ``start`` or after the last window are not counted."""
    counts = [0] * count
    for moment in finished_at:
        offset = (moment - start).total_seconds()
        if offset < 0:
            continue
        slot = int(offset // seconds)
        if slot < count:
            counts[slot] += 1
    return [Minute(index=i, seconds=seconds, finished=n) for i, n in enumerate(counts)]


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else 0.0


def end_medians(values: Sequence[float], share: int = 6) -> tuple[float, float]:
    """The median of the first and of the last sixth of ``values`` (one per minute; at least
    one minute each): a level that one noisy minute at either end cannot swing, and that a line
    fitted through early spikes cannot push below zero."""
    if not values:
        return (0.0, 0.0)
    k = max(1, len(values) // share)
    return (statistics.median(values[:k]), statistics.median(values[-k:]))


def trend_ratio(values: Sequence[float]) -> float:
    """The last sixth's median over the first sixth's: 1.0 flat, above 1 growing."""
    first, last = end_medians(values)
    return ratio(last, first)


def held_ratios(
    minutes: Sequence[Minute], *, held: set[int], base: set[int]
) -> tuple[float, float, float]:
    """(mean rate of the ``held`` minutes, their worst minute, mean rate of the ``base``
    minutes): a long transaction was open in the held minutes and not in the base ones."""
    with_txn = [m.rate for m in minutes if m.index in held]
    without = [m.rate for m in minutes if m.index in base]
    if not with_txn or not without:
        return (0.0, 0.0, 0.0)
    return (sum(with_txn) / len(with_txn), min(with_txn), sum(without) / len(without))
