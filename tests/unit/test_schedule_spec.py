"""Schedule input rules: every bad value has its own job_schedule.* code, raised before any SQL
(these tests have no database at all), and the declarations registry refuses duplicates."""

from __future__ import annotations

import datetime as dt
import uuid
import zoneinfo
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from runledger_django.domain import JSONValue, TargetSpec
from runledger_django.errors import RunledgerError
from runledger_django.services.schedules.spec import build_spec
from runledger_django.worker.scheduler import Declarations


def code_of(**kwargs: Any) -> str:
    values: dict[str, Any] = {"name": "nightly", "target": "shop.report", "cron": "0 3 * * *"}
    values.update(kwargs)
    with pytest.raises(RunledgerError) as info:
        build_spec(values.pop("name"), values.pop("target"), **values)
    assert info.value.category.value == "validation"
    return info.value.code


class FakeTask:
    """A JobTarget as RunledgerTask implements it."""

    def __init__(self, *, fail: BaseException | None = None) -> None:
        self.fail = fail

    def job_target(self, args: Sequence[JSONValue], kwargs: Mapping[str, JSONValue]) -> TargetSpec:
        if self.fail is not None:
            raise self.fail
        return TargetSpec(
            job_type="task:default:shop.tasks.report",
            payload={
                "backend": "default",
                "keyed": False,
                "args": list(args),
                "kwargs": {**kwargs},
            },
            priority=10,
        )


def test_build_spec__defaults() -> None:
    spec = build_spec("nightly", "shop.report", cron="0 3 * * *")
    assert (spec.timezone, spec.catch_up, spec.overlap, spec.jitter_seconds) == (
        "UTC",
        "latest",
        "allow",
        0,
    )
    assert (spec.payload_json, spec.enabled, spec.priority) == ("{}", True, None)


@pytest.mark.parametrize("name", ["", "   ", " padded", "padded ", "a\x00b", "\u00a0x", "x" * 256])
def test_build_spec__bad_name__invalid_name(name: str) -> None:
    assert code_of(name=name) == "job_schedule.invalid_name"


@pytest.mark.parametrize("name", [None, 5, b"bytes"])
def test_build_spec__name_not_text__invalid_name(name: object) -> None:
    assert code_of(name=name) == "job_schedule.invalid_name"


@pytest.mark.parametrize(
    "cron",
    ["", " 0 3 * * *", "0 3 * * * ", "@reboot", "0 3 * * * * 2030", "99 * * * *", 5, "x" * 300],
)
def test_build_spec__bad_cron__invalid_cron(cron: object) -> None:
    assert code_of(cron=cron) == "job_schedule.invalid_cron"


def test_build_spec__nickname__stored_as_written() -> None:
    assert build_spec("n", "shop.report", cron="@daily").cron == "@daily"


def test_build_spec__no_match_in_fifty_years__invalid_cron() -> None:
    assert code_of(cron="0 0 30 2 *") == "job_schedule.invalid_cron"


def test_build_spec__cron_and_every__one_of_them() -> None:
    assert code_of(cron=None) == "job_schedule.invalid_cron"
    assert code_of(every=dt.timedelta(minutes=1)) == "job_schedule.invalid_interval"


@pytest.mark.parametrize(
    "every", [dt.timedelta(0), dt.timedelta(milliseconds=1500), -5, 0, 1.5, "60", True]
)
def test_build_spec__bad_interval__invalid_interval(every: object) -> None:
    assert code_of(cron=None, every=every) == "job_schedule.invalid_interval"


def test_build_spec__interval__whole_seconds() -> None:
    spec = build_spec("beat", "shop.ping", every=dt.timedelta(seconds=90))
    assert (spec.cron, spec.interval_seconds) == (None, 90)


@pytest.mark.parametrize(
    "zone", ["", "Mars/Olympus", "../../etc/passwd", "/etc/localtime", "Europe/Berlin ", 5, None]
)
def test_build_spec__bad_timezone__invalid_timezone(zone: object) -> None:
    assert code_of(timezone=zone) == "job_schedule.invalid_timezone"


def test_build_spec__zoneinfo_instance__its_key() -> None:
    spec = build_spec("n", "t", cron="0 3 * * *", timezone=zoneinfo.ZoneInfo("Europe/Berlin"))
    assert spec.timezone == "Europe/Berlin"


@pytest.mark.parametrize(
    "jitter", [-1, 86_401, dt.timedelta(days=2), dt.timedelta(milliseconds=10), 1.0, "5", True]
)
def test_build_spec__bad_jitter__invalid_jitter(jitter: object) -> None:
    assert code_of(jitter=jitter) == "job_schedule.invalid_jitter"


def test_build_spec__jitter_bounds__accepted() -> None:
    assert build_spec("n", "t", cron="* * * * *", jitter=86_400).jitter_seconds == 86_400
    assert (
        build_spec("n", "t", cron="* * * * *", jitter=dt.timedelta(minutes=5)).jitter_seconds == 300
    )


@pytest.mark.parametrize("target", ["", "  ", 5, None, object(), "x" * 300])
def test_build_spec__bad_target__invalid_target(target: object) -> None:
    assert code_of(target=target) == "job_schedule.invalid_target"


@pytest.mark.parametrize(
    "payload", [{"at": dt.datetime.now(dt.UTC)}, {1: "x"}, float("nan"), {"s": {1, 2}}]
)
def test_build_spec__bad_payload__invalid_payload(payload: object) -> None:
    assert code_of(payload=payload) == "job_schedule.invalid_payload"


def test_build_spec__args_with_a_job_type__invalid_argument() -> None:
    assert code_of(args=[1]) == "job_schedule.invalid_argument"


def test_build_spec__task_target__its_job_type_payload_and_priority() -> None:
    spec = build_spec("t", FakeTask(), cron="* * * * *", args=[1], kwargs={"x": 2})
    assert spec.job_type == "task:default:shop.tasks.report"
    assert spec.payload_json == '{"backend":"default","keyed":false,"args":[1],"kwargs":{"x":2}}'
    assert spec.priority == 10
    assert build_spec("t", FakeTask(), cron="* * * * *", priority=-3).priority == -3


def test_build_spec__task_target_with_payload__invalid_argument() -> None:
    assert code_of(target=FakeTask(), payload={"a": 1}) == "job_schedule.invalid_argument"


def test_build_spec__task_refuses_its_arguments__invalid_payload() -> None:
    assert code_of(target=FakeTask(fail=TypeError("not JSON"))) == "job_schedule.invalid_payload"
    assert code_of(target=FakeTask(), args="abc") == "job_schedule.invalid_payload"
    assert code_of(target=FakeTask(), kwargs=[1]) == "job_schedule.invalid_payload"


def test_build_spec__task_not_usable__invalid_target() -> None:
    assert code_of(target=FakeTask(fail=LookupError("no backend"))) == "job_schedule.invalid_target"


@pytest.mark.parametrize("org", ["not-a-uuid", 5, b"x"])
def test_build_spec__bad_organization__invalid_organization_id(org: object) -> None:
    assert code_of(organization_id=org) == "job_schedule.invalid_organization_id"


def test_build_spec__organization_text__a_uuid() -> None:
    org = uuid.uuid4()
    assert build_spec("n", "t", cron="* * * * *", organization_id=str(org)).organization_id == org


@pytest.mark.parametrize("priority", [2**31, -(2**31) - 1, 1.0, "1", True])
def test_build_spec__bad_priority__invalid_priority(priority: object) -> None:
    assert code_of(priority=priority) == "job_schedule.invalid_priority"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"catch_up": "every"},
        {"catch_up": None},
        {"catch_up_grace": 0},
        {"catch_up_grace": dt.timedelta(milliseconds=5)},
        {"catch_up_limit": 0},
        {"catch_up_limit": 10_001},
        {"catch_up_limit": True},
    ],
)
def test_build_spec__bad_catch_up__invalid_catch_up(kwargs: dict[str, Any]) -> None:
    assert code_of(**kwargs) == "job_schedule.invalid_catch_up"


@pytest.mark.parametrize("overlap", ["queue", None, 1])
def test_build_spec__bad_overlap__invalid_overlap(overlap: object) -> None:
    assert code_of(overlap=overlap) == "job_schedule.invalid_overlap"


@pytest.mark.parametrize("kwargs", [{"enabled": 1}, {"enabled": None}, {"run_on_create": "yes"}])
def test_build_spec__flags_not_bool__invalid_argument(kwargs: dict[str, Any]) -> None:
    assert code_of(**kwargs) == "job_schedule.invalid_argument"


def test_declarations__same_name_twice__improperly_configured() -> None:
    declared = Declarations()
    declared.add(build_spec("nightly", "shop.report", cron="0 3 * * *"))
    with pytest.raises(ImproperlyConfigured, match="declared twice"):
        declared.add(build_spec("nightly", "shop.other", cron="0 4 * * *"))
    assert [spec.name for spec in declared.specs()] == ["nightly"]
