"""The schedules' admin through the test client: the columns, the actions (through the
services, logged), editing and adding with the API's validation, declared schedules read-only,
and the definitions page refusing to disable a type an active schedule uses."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from runledger_django.models import Job, JobDefinition, JobSchedule, ScheduleFire
from runledger_django.services.schedules import run_schedule_pass

from .conftest import SCHEDULED_TYPE, MakeSchedule, at

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "admin:runledger_jobschedule_changelist"


@pytest.fixture
def staff(client: Client) -> Client:
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(user)
    return client


def form_data(**overrides: object) -> dict[str, object]:
    data: dict[str, object] = {
        "name": "nightly",
        "target": SCHEDULED_TYPE,
        "cron_expr": "30 2 * * *",
        "interval_seconds": "",
        "timezone": "Europe/Berlin",
        "payload_template": '{"kind": "daily"}',
        "organization_id": "",
        "priority": "",
        "max_jitter_seconds": "0",
        "catch_up": "latest",
        "catch_up_grace_seconds": "60",
        "catch_up_limit": "100",
        "overlap": "allow",
        "is_active": "on",
        "retime_0": "",
        "retime_1": "",
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


def test_changelist__columns_in_words_local_and_utc_last_job(
    staff: Client, make_schedule: MakeSchedule
) -> None:
    make_schedule(
        "nightly", cron="30 2 * * *", timezone="Europe/Berlin", cursor=at("2026-05-26T00:30")
    )
    run_schedule_pass(now=at("2026-05-26T00:30"))
    response = staff.get(reverse(CHANGELIST))
    text = response.content.decode()
    assert response.status_code == 200
    assert "At 02:30 every day" in text
    assert "CEST" in text or "CET" in text
    assert " UTC" in text
    job = Job.objects.get()
    assert str(job.id) in text  # the last fire's job, linked
    assert "active" in text


def test_actions__pause_resume_run_now__through_the_services_and_logged(
    staff: Client, make_schedule: MakeSchedule
) -> None:
    row = make_schedule("s", cursor=at("2030-01-01T00:00"))
    url = reverse(CHANGELIST)
    for action in ("pause_selected", "resume_selected", "run_selected_now"):
        response = staff.post(url, {"action": action, "_selected_action": [str(row.pk)]})
        assert response.status_code == 302
    schedule = JobSchedule.objects.get()
    assert schedule.paused_at is None
    assert ScheduleFire.objects.filter(kind="manual").count() == 1
    assert Job.objects.count() == 1
    messages = list(LogEntry.objects.values_list("change_message", flat=True))
    assert any("paused" in m for m in messages) and any("run now" in m for m in messages)


def test_add__same_validation_as_the_api(
    staff: Client, scheduled_definition: JobDefinition
) -> None:
    url = reverse("admin:runledger_jobschedule_add")
    bad = staff.post(url, form_data(cron_expr="61 * * * *"))
    assert bad.status_code == 200
    assert "Schedule cron must be" in bad.content.decode()
    bad_zone = staff.post(url, form_data(timezone="Mars/Olympus"))
    assert "valid IANA zone name" in bad_zone.content.decode()
    both = staff.post(url, form_data(interval_seconds="60"))
    assert both.status_code == 200 and not JobSchedule.objects.exists()
    good = staff.post(url, form_data())
    assert good.status_code == 302, good.content.decode()[:2000]
    row = JobSchedule.objects.get()
    assert (row.cron_expr, row.timezone, row.payload_template, row.declared) == (
        "30 2 * * *",
        "Europe/Berlin",
        {"kind": "daily"},
        False,
    )


def test_change__runtime_schedule_edited_and_retimed(
    staff: Client, make_schedule: MakeSchedule
) -> None:
    row = make_schedule("nightly", cron="30 2 * * *")
    url = reverse("admin:runledger_jobschedule_change", args=[row.pk])
    assert staff.get(url).status_code == 200
    response = staff.post(
        url,
        form_data(
            cron_expr="0 4 * * *", timezone="UTC", retime_0="2031-01-01", retime_1="00:00:00"
        ),
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    row.refresh_from_db()
    assert row.cron_expr == "0 4 * * *"
    assert row.next_fire_at == at("2031-01-01T00:00")


def test_change__declared_schedule__fields_read_only_delete_refused(
    staff: Client, make_schedule: MakeSchedule
) -> None:
    row = make_schedule("declared", cron="30 2 * * *")
    JobSchedule.objects.update(declared=True)
    url = reverse("admin:runledger_jobschedule_change", args=[row.pk])
    page = staff.get(url).content.decode()
    assert 'name="cron_expr"' not in page
    response = staff.post(url, {"retime_0": "2031-01-01", "retime_1": "00:00:00"})
    assert response.status_code == 302
    row.refresh_from_db()
    assert (row.cron_expr, row.next_fire_at) == ("30 2 * * *", at("2031-01-01T00:00"))
    assert (
        staff.get(reverse("admin:runledger_jobschedule_delete", args=[row.pk])).status_code == 403
    )


def test_definitions__disable_with_an_active_schedule__form_error(
    staff: Client, make_schedule: MakeSchedule
) -> None:
    make_schedule("s")
    url = reverse("admin:runledger_jobdefinition_change", args=[SCHEDULED_TYPE])
    definition = JobDefinition.objects.get(job_type=SCHEDULED_TYPE)
    response = staff.post(
        url,
        {
            "max_attempts": definition.max_attempts,
            "default_timeout_seconds": definition.default_timeout_seconds,
            "default_priority": definition.default_priority,
            "version": definition.version,
        },
    )
    assert response.status_code == 200
    assert "cannot be disabled while an active schedule uses it" in response.content.decode()
    assert JobDefinition.objects.get(job_type=SCHEDULED_TYPE).is_enabled
