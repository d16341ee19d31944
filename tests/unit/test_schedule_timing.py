"""Schedule time math without a database: cron and intervals, the DST rule, jitter (the seed's
vectors), the stale search, and the catch-up plans."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from collections.abc import Iterator

import pytest

from runledger_django.services.schedules.timing import (
    STALE_SEARCH_LIMIT,
    CronError,
    Timing,
    describe_cron,
    describe_interval,
    format_scheduled_for,
    parse_cron,
    plan_fires,
)

UTC = dt.UTC
NIL = uuid.UUID(int=0)
SEED_ID = uuid.UUID("018fa1f8-0000-7000-8000-000000000123")


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def timing(
    cron: str | None = "* * * * *",
    *,
    zone: str = "UTC",
    jitter: int = 0,
    schedule_id: uuid.UUID = NIL,
    every: int | None = None,
) -> Timing:
    return Timing(
        cron=None if every is not None else cron,
        interval_seconds=every,
        timezone=zone,
        jitter_seconds=jitter,
        schedule_id=schedule_id,
    )


def fires(t: Timing, after: str, count: int) -> list[str]:
    return [
        instant.strftime("%Y-%m-%dT%H:%M:%SZ")
        for instant in itertools.islice(t.instants_after(at(after)), count)
    ]


# --- the seed's jitter vectors and stale search (reference 1.6, scheduler tests 1-7) ---------


def test_jitter__seed_vectors() -> None:
    assert timing(schedule_id=SEED_ID, jitter=30).jitter(at("2026-05-26T12:01")) == (
        dt.timedelta(seconds=3)
    )
    assert timing(jitter=60).jitter(at("2026-02-01T12:05")) == dt.timedelta(seconds=54)
    assert timing(jitter=5).jitter(at("2026-02-01T12:00:01")) == dt.timedelta(seconds=4)
    assert timing(jitter=5).jitter(at("2026-02-01T12:00:03")) == dt.timedelta(0)


def test_next_after_cursor__deterministic_jitter__stable_and_differs_from_none() -> None:
    jittered = timing("0 * * * * *", schedule_id=SEED_ID, jitter=30)
    assert jittered.next_after_cursor(at("2026-05-26T12:00:30")) == at("2026-05-26T12:01:03")
    assert jittered.next_after_cursor(at("2026-05-26T12:00:30")) == at("2026-05-26T12:01:03")
    plain = timing("0 * * * * *", schedule_id=SEED_ID)
    assert plain.next_after_cursor(at("2026-05-26T12:00:30")) == at("2026-05-26T12:01")


def test_first_fire_after__backlog__moves_past_now() -> None:
    assert timing().first_fire_after(at("2026-05-26T12:05")) == at("2026-05-26T12:06")


def test_first_fire_after__earlier_instant_pushed_past_now__kept() -> None:
    # 12:05 + 54 s lands after now (12:05:30) and before 12:06 + its jitter.
    assert timing(jitter=60).first_fire_after(at("2026-02-01T12:05:30")) == (
        at("2026-02-01T12:05:54")
    )


def test_first_fire_after__reordered_instants__earliest_real_fire() -> None:
    assert timing("*/1 * * * * * *", jitter=5).first_fire_after(at("2026-02-01T12:00:02")) == (
        at("2026-02-01T12:00:03")
    )


def test_first_fire_after__matches_brute_force_over_a_matrix() -> None:
    for jitter, cron, minute in itertools.product(
        (0, 1, 5, 59, 61, 600), ("* * * * *", "*/7 * * * * *"), (0, 1, 30)
    ):
        t = timing(cron, jitter=jitter, schedule_id=SEED_ID)
        now = at(f"2026-03-01T10:{minute:02d}:17")
        start = now - dt.timedelta(seconds=jitter + 1)
        candidates = [t.fire_of(i) for i in itertools.islice(t.instants_after(start), 2000)]
        expected = min(fire for fire in candidates if fire > now)
        assert t.first_fire_after(now) == expected, (jitter, cron, minute)


class CountingTiming(Timing):
    """Counts the cron instants a search looks at."""

    __slots__ = ("counted",)
    counted: int

    def instants_after(self, after: dt.datetime) -> Iterator[dt.datetime]:
        for instant in super().instants_after(after):
            self.counted += 1
            yield instant


def counting(cron: str, jitter: int) -> CountingTiming:
    t = CountingTiming(
        cron=cron,
        interval_seconds=None,
        timezone="UTC",
        jitter_seconds=jitter,
        schedule_id=SEED_ID,
    )
    t.counted = 0
    return t


def test_first_fire_after__maximum_jitter_sparse_cron__stops_early() -> None:
    t = counting("0 * * * *", 86_400)
    fire = t.first_fire_after(at("2026-01-01T00:00"))
    assert fire > at("2026-01-01T00:00")
    assert t.counted < 60


def test_first_fire_after__maximum_jitter_dense_cron__stops_at_the_cap() -> None:
    t = counting("* * * * * *", 86_400)
    now = at("2026-01-01T00:00")
    assert t.first_fire_after(now) > now
    assert t.counted == STALE_SEARCH_LIMIT


def test_jitter__bounded_and_zero_without_maximum() -> None:
    t = timing(jitter=7, schedule_id=uuid.uuid4())
    for instant in itertools.islice(t.instants_after(at("2026-01-01")), 500):
        assert dt.timedelta(0) <= t.jitter(instant) <= dt.timedelta(seconds=7)
    assert timing(jitter=0, schedule_id=uuid.uuid4()).jitter(at("2026-01-01")) == dt.timedelta(0)


def test_jitter__many_schedules_same_cron__spread_over_the_window() -> None:
    """Tenant stagger: distinct ids spread the same fire over the jitter window."""
    instant = at("2026-06-01T03:00")
    seconds = {
        int(timing("0 3 * * *", jitter=300, schedule_id=uuid.uuid4()).jitter(instant).seconds)
        for _ in range(200)
    }
    assert len(seconds) > 100
    assert min(seconds) < 60 and max(seconds) > 240


# --- cron dialect ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("*/1 * * * * * *", "*/1 * * * * *"),
        ("0 0 0 * * *", "0 0 0 * * *"),
        ("30 2 * * *", "30 2 * * *"),
    ],
)
def test_parse_cron__accepted_forms(text: str, expression: str) -> None:
    parsed = parse_cron(text)
    assert (parsed.written, parsed.expression) == (text, expression)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " * * * * *",
        "* * * * * ",
        "@reboot",
        "@often",
        "* * * *",
        "* * * * * * 2027",
        "* * * * * * * *",
        "61 * * * *",
        "0 0 30 2 *",
        "not a cron",
        "0 0 31 2,4 *",
    ],
)
def test_parse_cron__refused(text: str) -> None:
    with pytest.raises(CronError):
        parse_cron(text)


def test_describe__cron_and_interval_in_words() -> None:
    assert describe_cron("30 2 * * *") == "At 02:30 every day"
    assert describe_cron("@hourly") == "At minute 0 of every hour" or "hour" in describe_cron(
        "@hourly"
    )
    assert describe_interval(90) == "every 1 minute 30 seconds"
    assert describe_interval(7200) == "every 2 hours"


def test_intervals__anchored_to_the_epoch() -> None:
    t = timing(every=90)
    # 2026-01-01T00:00Z is 1767225600 s after the epoch, a multiple of 90.
    assert fires(t, "2026-01-01T00:00:10", 3) == [
        "2026-01-01T00:01:30Z",
        "2026-01-01T00:03:00Z",
        "2026-01-01T00:04:30Z",
    ]
    # The zone does not move an interval.
    assert fires(timing(every=90, zone="Asia/Kolkata"), "2026-01-01T00:00:10", 1) == [
        "2026-01-01T00:01:30Z"
    ]


def test_format_scheduled_for__z_and_fraction_only_when_not_zero() -> None:
    assert format_scheduled_for(at("2026-05-26T12:00")) == "2026-05-26T12:00:00Z"
    assert format_scheduled_for(at("2026-05-26T12:00:00.250000")) == "2026-05-26T12:00:00.25Z"
    berlin = dt.datetime(2026, 5, 26, 14, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert format_scheduled_for(berlin) == "2026-05-26T12:00:00Z"


# --- time zones and DST ---------------------------------------------------------------------


def test_cron__wall_time_in_the_zone__cursor_in_utc() -> None:
    assert fires(timing("0 9 * * *", zone="Europe/Berlin"), "2026-07-01T00:00", 1) == [
        "2026-07-01T07:00:00Z"
    ]


@pytest.mark.parametrize("cron", ["30 2 * * *", "0 30 2 * * *"])
def test_dst__new_york_spring_gap__once_at_three(cron: str) -> None:
    assert fires(timing(cron, zone="America/New_York"), "2026-03-07T00:00", 3) == [
        "2026-03-07T07:30:00Z",
        "2026-03-08T07:00:00Z",  # 03:00 EDT, the first instant after the gap
        "2026-03-09T06:30:00Z",
    ]


@pytest.mark.parametrize("cron", ["30 1 * * *", "0 30 1 * * *"])
def test_dst__new_york_autumn_repeat__once_at_the_first(cron: str) -> None:
    assert fires(timing(cron, zone="America/New_York"), "2026-10-31T00:00", 3) == [
        "2026-10-31T05:30:00Z",
        "2026-11-01T05:30:00Z",  # 01:30 EDT; the 01:30 EST an hour later does not fire
        "2026-11-02T06:30:00Z",
    ]


def test_dst__new_york_autumn_repeat__from_inside_the_repeat__next_day() -> None:
    # After the first 01:30 fired, a cursor computed during the second 01:00 hour does not
    # go back to it.
    assert fires(timing("30 1 * * *", zone="America/New_York"), "2026-11-01T06:10", 1) == [
        "2026-11-02T06:30:00Z"
    ]


def test_dst__new_york_wildcard_hour__follows_real_time() -> None:
    autumn = fires(timing("0 * * * *", zone="America/New_York"), "2026-11-01T04:30", 3)
    assert autumn == ["2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"]
    spring = fires(timing("0 * * * *", zone="America/New_York"), "2026-03-08T06:30", 2)
    assert spring == ["2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"]  # 03:00 EDT, 04:00 EDT


@pytest.mark.parametrize("cron", ["30 2 * * *", "0 30 2 * * *"])
def test_dst__berlin_spring_gap__once_after_the_gap(cron: str) -> None:
    assert fires(timing(cron, zone="Europe/Berlin"), "2026-03-28T12:00", 2) == [
        "2026-03-29T01:00:00Z",  # 03:00 CEST
        "2026-03-30T00:30:00Z",
    ]


@pytest.mark.parametrize("cron", ["30 2 * * *", "0 30 2 * * *"])
def test_dst__berlin_autumn_repeat__once(cron: str) -> None:
    assert fires(timing(cron, zone="Europe/Berlin"), "2026-10-24T12:00", 2) == [
        "2026-10-25T00:30:00Z",  # 02:30 CEST, the first occurrence
        "2026-10-26T01:30:00Z",
    ]


def test_dst__berlin_wildcard_minute__both_repeated_hours() -> None:
    repeated = fires(timing("*/30 2 * * *", zone="Europe/Berlin"), "2026-10-24T23:59", 4)
    assert repeated == [
        "2026-10-25T00:00:00Z",
        "2026-10-25T00:30:00Z",
        "2026-10-25T01:00:00Z",
        "2026-10-25T01:30:00Z",
    ]


def test_dst__lord_howe_half_hour_repeat__once_on_the_change_day() -> None:
    assert fires(timing("45 1 * * *", zone="Australia/Lord_Howe"), "2026-04-03T00:00", 3) == [
        "2026-04-03T14:45:00Z",
        "2026-04-04T14:45:00Z",  # 01:45 +11, the first of the two on 5 April
        "2026-04-05T15:15:00Z",  # 01:45 +10:30
    ]


def test_dst__lord_howe_half_hour_gap__once_after_it() -> None:
    assert fires(timing("15 2 * * *", zone="Australia/Lord_Howe"), "2026-10-02T00:00", 3) == [
        "2026-10-02T15:45:00Z",
        "2026-10-03T15:30:00Z",  # 02:30 +11, right after the gap of 4 October
        "2026-10-04T15:15:00Z",
    ]


# --- catch-up plans -------------------------------------------------------------------------


def test_plan_fires__on_time__one_fire_next_cursor() -> None:
    plan = plan_fires(
        timing(),
        due=at("2026-05-26T12:00"),
        now=at("2026-05-26T12:00:01"),
        catch_up="latest",
        grace_seconds=60,
        limit=100,
    )
    assert (plan.enqueue, plan.skipped_late, plan.coalesced) == ((at("2026-05-26T12:00"),), (), 0)
    assert plan.next_fire_at == at("2026-05-26T12:01")


def test_plan_fires__latest_after_downtime__oldest_fire_once_then_future() -> None:
    plan = plan_fires(
        timing(),
        due=at("2026-05-26T12:00"),
        now=at("2026-05-26T12:05:30"),
        catch_up="latest",
        grace_seconds=60,
        limit=100,
    )
    assert plan.enqueue == (at("2026-05-26T12:00"),)
    assert plan.coalesced == 5
    assert plan.next_fire_at == at("2026-05-26T12:06")


def test_plan_fires__all__every_missed_fire_up_to_the_limit() -> None:
    plan = plan_fires(
        timing(),
        due=at("2026-05-26T12:00"),
        now=at("2026-05-26T12:05:30"),
        catch_up="all",
        grace_seconds=60,
        limit=100,
    )
    assert plan.enqueue == tuple(at(f"2026-05-26T12:0{m}") for m in range(6))
    assert (plan.coalesced, plan.next_fire_at) == (0, at("2026-05-26T12:06"))
    bounded = plan_fires(
        timing(),
        due=at("2026-05-26T12:00"),
        now=at("2026-05-26T12:05:30"),
        catch_up="all",
        grace_seconds=60,
        limit=2,
    )
    assert bounded.enqueue == (at("2026-05-26T12:00"), at("2026-05-26T12:01"))
    assert (bounded.coalesced, bounded.next_fire_at) == (4, at("2026-05-26T12:06"))


def test_plan_fires__skip__late_recorded_recent_run() -> None:
    plan = plan_fires(
        timing(),
        due=at("2026-05-26T12:00"),
        now=at("2026-05-26T12:05:30"),
        catch_up="skip",
        grace_seconds=90,
        limit=100,
    )
    assert plan.skipped_late == tuple(at(f"2026-05-26T12:0{m}") for m in range(4))
    assert plan.enqueue == (at("2026-05-26T12:04"), at("2026-05-26T12:05"))
    assert plan.next_fire_at == at("2026-05-26T12:06")


def test_plan_fires__skip__single_late_fire__recorded_not_run() -> None:
    plan = plan_fires(
        timing("0 3 * * *"),
        due=at("2026-05-26T03:00"),
        now=at("2026-05-26T03:10"),
        catch_up="skip",
        grace_seconds=60,
        limit=100,
    )
    assert (plan.enqueue, plan.skipped_late) == ((), (at("2026-05-26T03:00"),))
    within = plan_fires(
        timing("0 3 * * *"),
        due=at("2026-05-26T03:00"),
        now=at("2026-05-26T03:00:40"),
        catch_up="skip",
        grace_seconds=60,
        limit=100,
    )
    assert (within.enqueue, within.skipped_late) == ((at("2026-05-26T03:00"),), ())


def test_plan_fires__skip__long_outage__bounded_records_rest_counted() -> None:
    plan = plan_fires(
        timing(),
        due=at("2026-05-26T00:00"),
        now=at("2026-05-26T12:00:30"),
        catch_up="skip",
        grace_seconds=60,
        limit=10,
    )
    assert len(plan.skipped_late) == 10
    assert plan.enqueue == (at("2026-05-26T12:00"),)
    assert plan.coalesced > 700
    assert plan.next_fire_at == at("2026-05-26T12:01")
