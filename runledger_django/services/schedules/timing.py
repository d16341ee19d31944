"""When a schedule fires: cron and interval instants, the DST rule, jitter and catch-up.

Pure time arithmetic on aware UTC datetimes, no database. Cron expressions are read by
cronsim (5 fields, or 6 with seconds first) as wall time in the schedule's zone; intervals are
anchored to the Unix epoch. The DST rule of SPEC: a fixed wall time that does not exist fires
once, at the first instant after the gap; one that occurs twice fires once, at the first
occurrence; a wildcard hour or minute follows real time. cronsim applies that rule to 5-field
expressions; this module applies it to 6-field ones too (cronsim leaves them alone).

Jitter follows the seed (reference 1.6): seconds = (schedule UUID as a 128-bit integer XOR the
cron instant in Unix milliseconds) mod (max + 1), added to the instant.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
MAX_JITTER_SECONDS = 86_400
STALE_SEARCH_LIMIT = 86_402
"""Cron instants the catch-up search looks at before it gives up (the seed's constant)."""
NO_MATCH_YEARS = 50
"""An expression without a match this far ahead is refused (cronsim stops looking there)."""
NEVER = dt.datetime(9999, 1, 1, tzinfo=UTC)
"""The cursor of a schedule that has no fire left: never due."""

NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class CronError(ValueError):
    """An expression this module cannot use; the message says why (for internal logs)."""


@dataclass(frozen=True, slots=True)
class CronExpr:
    """A parsed cron expression: the text cronsim reads, and how DST applies to it."""

    written: str
    expression: str
    """5 or 6 fields, nicknames expanded, a trailing ``*`` year dropped."""
    seconds_field: bool
    fixed_time: bool
    """Both minute and hour are fixed (not ``*``-led): the DST rule applies."""


@lru_cache(maxsize=4096)
def parse_cron(text: str) -> CronExpr:
    """Parse ``text`` or raise CronError.

    Accepts 5 fields, 6 with seconds first (the seed's order), 7 when the last (a year) is
    ``*``, and the nicknames ``@yearly`` ... ``@hourly``. ``@reboot`` has no instant and is
    refused, as is any expression with no match in the next 50 years.
    """
    if not isinstance(text, str) or not text or text != text.strip():
        raise CronError("blank or padded")
    expression = NICKNAMES.get(text.lower(), text)
    if expression.startswith("@"):
        raise CronError(f"unknown nickname {text!r}")
    fields = expression.split()
    if len(fields) == 7:
        if fields[6] != "*":
            raise CronError("a year field other than * is not supported")
        fields = fields[:6]
    if len(fields) not in (5, 6):
        raise CronError(f"{len(fields)} fields; expected 5 or 6")
    expression = " ".join(fields)
    minute, hour = (fields[0], fields[1]) if len(fields) == 5 else (fields[1], fields[2])
    parsed = CronExpr(
        written=text,
        expression=expression,
        seconds_field=len(fields) == 6,
        fixed_time=not minute.startswith("*") and not hour.startswith("*"),
    )
    start = dt.datetime(2000, 1, 1, tzinfo=UTC)
    try:
        iterator = CronSim(expression, start)
        first = next(iterator)
    except StopIteration:
        raise CronError(f"no match within {NO_MATCH_YEARS} years") from None
    except (CronSimError, ValueError, TypeError, IndexError, AssertionError) as exc:
        raise CronError(str(exc) or type(exc).__name__) from None
    if first.year > start.year + NO_MATCH_YEARS:
        raise CronError(f"no match within {NO_MATCH_YEARS} years")
    return parsed


def describe_cron(text: str) -> str:
    """The expression in English ("At 02:30 every day"), or the text itself."""
    try:
        parsed = parse_cron(text)
        return str(CronSim(parsed.expression, dt.datetime(2000, 1, 1, tzinfo=UTC)).explain())
    except (CronError, CronSimError, ValueError, KeyError, IndexError):
        return text


def describe_interval(seconds: int) -> str:
    """``every 1 hour 30 minutes``."""
    parts = []
    remaining = seconds
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60), ("second", 1)):
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count} {unit}{'' if count == 1 else 's'}")
    return "every " + " ".join(parts or ["0 seconds"])


@lru_cache(maxsize=1024)
def zone(name: str) -> dt.tzinfo:
    """The zone of ``name`` (validated by the caller); UTC as the fixed-offset singleton,
    which keeps cronsim on its fast path."""
    if name in ("UTC", "Etc/UTC"):
        return UTC
    return ZoneInfo(name)


def _is_imaginary(local: dt.datetime) -> bool:
    return local != local.astimezone(UTC).astimezone(local.tzinfo)


def _wall_to_utc(naive: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
    """A wall time as an instant, by the DST rule: the first occurrence of a repeated time;
    for a time inside a gap, the first instant after it (cronsim's minute steps, then back to
    the whole minute where that is still after the gap)."""
    local = naive.replace(tzinfo=tz, fold=0)
    if _is_imaginary(local):
        probe = naive
        for _ in range(24 * 60):
            probe += dt.timedelta(minutes=1)
            if not _is_imaginary(probe.replace(tzinfo=tz, fold=0)):
                break
        floored = probe.replace(second=0)
        if not _is_imaginary(floored.replace(tzinfo=tz, fold=0)):
            probe = floored
        local = probe.replace(tzinfo=tz, fold=0)
    return local.astimezone(UTC)


def _cron_candidates(cron: CronExpr, tz: dt.tzinfo, after: dt.datetime) -> Iterator[dt.datetime]:
    """Instants from cronsim, in order but possibly repeating or not after ``after`` (a
    repeated wall hour, a gap's end): ``Timing.instants_after`` filters them."""
    local = after.astimezone(tz)
    try:
        if cron.seconds_field and cron.fixed_time and tz is not UTC:
            # cronsim gives 6-field expressions no DST handling: walk wall time and apply
            # the rule here.
            for naive in CronSim(cron.expression, local.replace(tzinfo=None)):
                yield _wall_to_utc(naive, tz)
        else:
            for instant in CronSim(cron.expression, local):
                yield instant.astimezone(UTC)
    except (OverflowError, ValueError):
        return  # past datetime's range: no more fires


@lru_cache(maxsize=4096)
def _first_cron_instant(cron: CronExpr, tz: dt.tzinfo, after: dt.datetime) -> dt.datetime | None:
    """The first instant strictly after ``after`` (UTC). Cached: schedules that share an
    expression, a zone and a cursor (a digest per tenant at 09:00) share one cronsim walk,
    which is most of a pass's Python time for a sparse expression."""
    for instant in _cron_candidates(cron, tz, after):
        if instant > after:
            return instant
    return None


class Timing:
    """The fire times of one schedule: its cron or interval, zone, jitter and id."""

    __slots__ = ("cron", "interval_seconds", "jitter_seconds", "schedule_int", "tz")

    def __init__(
        self,
        *,
        cron: str | None,
        interval_seconds: int | None,
        timezone: str,
        jitter_seconds: int,
        schedule_id: uuid.UUID,
    ) -> None:
        if (cron is None) == (interval_seconds is None):
            raise CronError("exactly one of cron and interval")
        self.cron = parse_cron(cron) if cron is not None else None
        self.interval_seconds = interval_seconds
        self.tz = zone(timezone)
        self.jitter_seconds = max(0, jitter_seconds)
        self.schedule_int = schedule_id.int

    # -- instants --------------------------------------------------------------------------

    def instants_after(self, after: dt.datetime) -> Iterator[dt.datetime]:
        """Cron (or interval) instants strictly after ``after``, ascending, in UTC."""
        if self.interval_seconds is not None:
            yield from self._interval_after(self.interval_seconds, after)
            return
        if self.cron is None:
            return
        last = after.astimezone(UTC)
        for instant in _cron_candidates(self.cron, self.tz, last):
            if instant > last:
                last = instant
                yield instant

    @staticmethod
    def _interval_after(step: int, after: dt.datetime) -> Iterator[dt.datetime]:
        elapsed_us = (after - EPOCH) // dt.timedelta(microseconds=1)
        index = elapsed_us // (step * 1_000_000) + 1
        while True:
            try:
                yield EPOCH + dt.timedelta(seconds=index * step)
            except OverflowError:
                return
            index += 1

    def instant_after(self, after: dt.datetime) -> dt.datetime | None:
        if self.cron is not None:
            return _first_cron_instant(self.cron, self.tz, after.astimezone(UTC))
        return next(self.instants_after(after), None)

    # -- jitter ----------------------------------------------------------------------------

    def jitter(self, instant: dt.datetime) -> dt.timedelta:
        """The deterministic jitter of one instant (seed rule; zero without a maximum)."""
        if self.jitter_seconds <= 0:
            return dt.timedelta(0)
        millis = (instant - EPOCH) // dt.timedelta(milliseconds=1)
        seconds = (self.schedule_int ^ millis) % (self.jitter_seconds + 1)
        return dt.timedelta(seconds=seconds)

    def fire_of(self, instant: dt.datetime) -> dt.datetime:
        return instant + self.jitter(instant)

    # -- fires -----------------------------------------------------------------------------

    def next_after_cursor(self, cursor: dt.datetime) -> dt.datetime:
        """The fire after ``cursor``: the first instant strictly after it, plus its jitter."""
        instant = self.instant_after(cursor)
        return NEVER if instant is None else self.fire_of(instant)

    def first_fire_after(self, now: dt.datetime) -> dt.datetime:
        """The earliest jittered fire strictly after ``now`` (the seed's stale search).

        Jitter can push an earlier instant past a later one, so instants from ``max jitter
        + 1`` seconds before ``now`` are looked at, until one is not earlier than the best
        fire found (jitter is never negative), at most STALE_SEARCH_LIMIT of them.
        """
        if self.jitter_seconds <= 0:
            instant = self.instant_after(now)
            return NEVER if instant is None else instant
        start = now - dt.timedelta(seconds=self.jitter_seconds + 1)
        best: dt.datetime | None = None
        for count, instant in enumerate(self.instants_after(start), start=1):
            if best is not None and instant >= best:
                break
            fire = self.fire_of(instant)
            if fire > now and (best is None or fire < best):
                best = fire
            if count >= STALE_SEARCH_LIMIT:
                break
        if best is None:
            instant = self.instant_after(now)
            return NEVER if instant is None else self.fire_of(instant)
        return best

    def fires_in(
        self, start: dt.datetime, end: dt.datetime, *, limit: int
    ) -> tuple[list[dt.datetime], bool]:
        """Jittered fires in ``[start, end)``, ascending, at most ``limit`` of them; and
        whether more were left out."""
        fires: set[dt.datetime] = set()
        begin = start - dt.timedelta(seconds=self.jitter_seconds + 1)
        for instant in self.instants_after(begin):
            if instant >= end:
                break
            fire = self.fire_of(instant)
            if start <= fire < end:
                fires.add(fire)
            if len(fires) > limit:
                break
        ordered = sorted(fires)
        return ordered[:limit], len(ordered) > limit


@dataclass(frozen=True, slots=True)
class FirePlan:
    """What to do with one due schedule now."""

    enqueue: tuple[dt.datetime, ...]
    """Fires to materialize as jobs, oldest first."""
    skipped_late: tuple[dt.datetime, ...]
    """Fires to record as skipped (catch-up ``skip``)."""
    coalesced: int
    """Missed fires neither run nor recorded one by one."""
    next_fire_at: dt.datetime
    """The new cursor."""


COUNT_LIMIT = 1_000
"""Missed fires counted one by one after a long outage; the count stops there."""


def plan_fires(
    timing: Timing,
    *,
    due: dt.datetime,
    now: dt.datetime,
    catch_up: str,
    grace_seconds: int,
    limit: int,
) -> FirePlan:
    """Decide the fires of a schedule whose fire ``due`` (its scheduled_for) has come.

    ``latest``: one job for ``due``; the missed fires after it are coalesced and the cursor
    lands on the first fire after ``now``. ``all``: every fire up to ``now``, at most
    ``limit``, the rest coalesced. ``skip``: fires older than ``grace_seconds`` are recorded
    as skipped (at most ``limit``, the rest coalesced), the others run.
    """
    following = timing.next_after_cursor(due)
    if following > now:
        if catch_up == "skip" and now - due > dt.timedelta(seconds=grace_seconds):
            return FirePlan((), (due,), 0, following)
        return FirePlan((due,), (), 0, following)
    cursor = timing.first_fire_after(now)
    if catch_up == "latest":
        return FirePlan((due,), (), _count_between(timing, due, cursor), cursor)
    if catch_up == "all":
        fires = [due]
        current = following
        while current <= now and len(fires) < limit:
            fires.append(current)
            current = timing.next_after_cursor(current)
        rest = _count_between(timing, fires[-1], cursor) if current <= now else 0
        return FirePlan(tuple(fires), (), rest, cursor)
    horizon = now - dt.timedelta(seconds=grace_seconds)
    late: list[dt.datetime] = []
    coalesced = 0
    current = due
    while current < horizon and len(late) < limit:
        late.append(current)
        current = timing.next_after_cursor(current)
    if current < horizon:
        # More late fires than the limit: count the rest, go on from the grace window.
        resume = timing.first_fire_after(horizon - dt.timedelta(microseconds=1))
        coalesced += _count_between(timing, late[-1], resume)
        current = resume
    recent: list[dt.datetime] = []
    while current <= now and len(recent) < limit:
        recent.append(current)
        current = timing.next_after_cursor(current)
    if current <= now:
        coalesced += _count_between(timing, recent[-1], cursor)
    return FirePlan(tuple(recent), tuple(late), coalesced, cursor)


def _count_between(timing: Timing, after: dt.datetime, before: dt.datetime) -> int:
    """Fires strictly between two fires (at most COUNT_LIMIT), on one cron iterator."""
    count = 0
    for instant in timing.instants_after(after):
        if count >= COUNT_LIMIT or timing.fire_of(instant) >= before:
            break
        if timing.fire_of(instant) > after:
            count += 1
    return count


def format_scheduled_for(value: dt.datetime) -> str:
    """RFC 3339 in UTC with ``Z``, fractional seconds only when not zero (the seed's form)."""
    utc = value.astimezone(UTC)
    text = (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T"
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
    )
    if utc.microsecond:
        text += f".{utc.microsecond:06d}".rstrip("0")
    return text + "Z"
