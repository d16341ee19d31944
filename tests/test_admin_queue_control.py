"""The job definitions' admin for queue control: the pause shown in the list, the pause and
resume actions behind their own permissions, and the limits as editable fields
(docs/queue-control.md; checklist 36)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from runledger_django import enqueue_job, job_metrics, pause_job_type
from runledger_django.admin import definitions as definitions_admin
from runledger_django.domain import ReadScope
from runledger_django.models import JobDefinition
from tests.conftest import TEST_JOB_TYPE, MakeDefinition

pytestmark = pytest.mark.django_db

OTHER = "jobs.test.other"
DEFINITIONS_URL = reverse("admin:runledger_jobdefinition_changelist")
CHANGE_URL = reverse("admin:runledger_jobdefinition_change", args=(TEST_JOB_TYPE,))


@pytest.fixture
def two_types(make_definition: MakeDefinition) -> None:
    make_definition()
    make_definition(OTHER)


def staff(client: Client, *codenames: str) -> Client:
    user = User.objects.create_user("operator", is_staff=True)
    permissions = Permission.objects.filter(
        content_type__app_label="runledger", codename__in=codenames
    )
    assert permissions.count() == len(codenames)
    user.user_permissions.add(*permissions)
    client.force_login(user)
    return client


def action_names(response: Any) -> list[str]:
    form = response.context["action_form"]
    return [] if form is None else [name for name, _ in form.fields["action"].choices if name]


def post_action(client: Client, action: str, types: list[str]) -> Any:
    return client.post(DEFINITIONS_URL, {"action": action, "_selected_action": types}, follow=True)


def shown_messages(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def paused_types() -> set[str]:
    return set(
        JobDefinition.objects.filter(paused_at__isnull=False).values_list("job_type", flat=True)
    )


def test_definitions__change_permission_alone__no_pause_or_resume_action(
    client: Client, two_types: None
) -> None:
    operator = staff(client, "view_jobdefinition", "change_jobdefinition")

    assert action_names(operator.get(DEFINITIONS_URL)) == []
    post_action(operator, "pause_selected_types", [TEST_JOB_TYPE])
    assert paused_types() == set()


def test_definitions__pause_permission__pauses_with_the_operator_as_actor(
    client: Client, two_types: None
) -> None:
    operator = staff(client, "view_jobdefinition", "pause_jobdefinition")
    assert action_names(operator.get(DEFINITIONS_URL)) == ["pause_selected_types"]

    response = post_action(operator, "pause_selected_types", [TEST_JOB_TYPE])

    assert shown_messages(response) == ["Paused 1 job type."]
    definition = JobDefinition.objects.get(job_type=TEST_JOB_TYPE)
    assert (definition.paused_at is not None, definition.paused_by) == (True, "operator")
    again = post_action(operator, "pause_selected_types", [TEST_JOB_TYPE, OTHER])
    assert shown_messages(again) == ["Paused 1 job type.", "1 job type was paused already."]
    assert paused_types() == {TEST_JOB_TYPE, OTHER}
    # Resuming needs its own permission.
    post_action(operator, "resume_selected_types", [TEST_JOB_TYPE])
    assert paused_types() == {TEST_JOB_TYPE, OTHER}


def test_definitions__resume_permission__resumes(client: Client, two_types: None) -> None:
    pause_job_type(TEST_JOB_TYPE)
    operator = staff(client, "view_jobdefinition", "resume_jobdefinition")
    assert action_names(operator.get(DEFINITIONS_URL)) == ["resume_selected_types"]

    response = post_action(operator, "resume_selected_types", [TEST_JOB_TYPE])

    assert shown_messages(response) == ["Resumed 1 job type."]
    assert paused_types() == set()


def test_definitions__changelist_shows_the_pause_and_the_limits(
    admin_client: Client, two_types: None
) -> None:
    pause_job_type(TEST_JOB_TYPE, reason="partner down")
    JobDefinition.objects.filter(job_type=OTHER).update(
        max_concurrency=5, rate_limit_count=10, rate_limit_period_seconds=60
    )

    page = admin_client.get(DEFINITIONS_URL).content.decode()
    filtered = admin_client.get(DEFINITIONS_URL, {"paused_at__isempty": "0"})

    assert "at most 5 running, 10 starts per 60 s" in page
    assert [row.job_type for row in filtered.context["cl"].result_list] == [TEST_JOB_TYPE]
    change = admin_client.get(CHANGE_URL).content.decode()
    assert "partner down" in change  # the reason, read-only on the change page


def test_job_metrics__shows_the_pause(two_types: None) -> None:
    enqueue_job(TEST_JOB_TYPE, {})
    enqueue_job(OTHER, {})
    pause_job_type(TEST_JOB_TYPE)

    rows = {row.job_type: row.paused for row in job_metrics(scope=ReadScope.ADMIN)}

    assert rows == {TEST_JOB_TYPE: True, OTHER: False}


def definition_form(**changes: str) -> dict[str, str]:
    data = {
        "is_enabled": "on",
        "max_attempts": "3",
        "default_timeout_seconds": "60",
        "default_priority": "100",
        "version": "1",
        "max_concurrency": "",
        "rate_limit_count": "",
        "rate_limit_period_seconds": "",
    }
    data.update(changes)
    return data


def test_definition_change__limits_editable(admin_client: Client, two_types: None) -> None:
    response = admin_client.post(
        CHANGE_URL,
        definition_form(max_concurrency="5", rate_limit_count="10", rate_limit_period_seconds="60"),
    )

    assert response.status_code == 302
    assert JobDefinition.objects.values_list(
        "max_concurrency", "rate_limit_count", "rate_limit_period_seconds"
    ).get(job_type=TEST_JOB_TYPE) == (5, 10, 60)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"max_concurrency": "0"}, "max_concurrency"),
        ({"rate_limit_count": "-1", "rate_limit_period_seconds": "60"}, "rate_limit_count"),
        ({"rate_limit_count": "10"}, None),
        ({"rate_limit_period_seconds": "60"}, None),
        ({"rate_limit_count": "10001", "rate_limit_period_seconds": "60"}, None),
    ],
    ids=["zero-concurrency", "negative-count", "count-alone", "period-alone", "count-too-big"],
)
def test_definition_change__invalid_limits__form_error_nothing_saved(
    admin_client: Client, two_types: None, changes: dict[str, str], field: str | None
) -> None:
    response = admin_client.post(CHANGE_URL, definition_form(**changes))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert (field in errors) if field else errors
    assert JobDefinition.objects.values_list(
        "max_concurrency", "rate_limit_count", "rate_limit_period_seconds"
    ).get(job_type=TEST_JOB_TYPE) == (None, None, None)


def test_definitions__action_over_the_limit__refused_whole(
    admin_client: Client, two_types: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(definitions_admin, "ACTION_LIMIT", 1)

    response = post_action(admin_client, "pause_selected_types", [TEST_JOB_TYPE, OTHER])

    assert shown_messages(response) == ["Select at most 1 job types at once; nothing was changed."]
    assert paused_types() == set()
