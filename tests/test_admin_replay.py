"""The admin's Replay button on a succeeded job's page: its own permission, one replay per
submitted form, and the service's refusals shown as messages."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from runledger_django import enqueue_job
from runledger_django.models import JobReplay
from runledger_django.services.claim import claim_jobs
from runledger_django.services.lifecycle import complete_job_success
from tests.conftest import TEST_JOB_TYPE, MakeDefinition

pytestmark = pytest.mark.django_db


def job_url(job_id: uuid.UUID) -> str:
    return reverse("admin:runledger_job_change", args=(job_id,))


def replay_url(job_id: uuid.UUID) -> str:
    return reverse("admin:runledger_job_replay", args=(job_id,))


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


@pytest.fixture
def done(make_definition: MakeDefinition) -> uuid.UUID:
    make_definition()
    job_id = enqueue_job(TEST_JOB_TYPE, {"invoice": 1}).job_id
    [claimed] = claim_jobs([TEST_JOB_TYPE], worker_id="admin-test", limit=1, lease_seconds=60)
    complete_job_success(claimed.lease, output={"sent": True})
    return job_id


def login(client: Client, *codenames: str) -> Client:
    user = User.objects.create_user("staff", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="runledger", codename__in=codenames)
    )
    client.force_login(user)
    return client


def form_fields(page: str) -> dict[str, str]:
    return dict(re.findall(r'name="(request_key|run_number)" value="([^"]*)"', page))


def test_job_admin__replay_permission__form_replays_once_per_submit(
    client: Client, done: uuid.UUID
) -> None:
    staff = login(client, "view_job", "replay_job")
    page = staff.get(job_url(done)).content.decode()
    assert f'action="{replay_url(done)}"' in page
    fields = form_fields(page)
    assert fields["run_number"] == "1" and fields["request_key"].startswith("admin:")

    first = staff.post(replay_url(done), {**fields, "reason": "customer asked"}, follow=True)
    replay = JobReplay.objects.get(source_job_id=done)
    assert first.redirect_chain[-1][0] == job_url(replay.replay_job_id)
    source_link = f'<a href="{job_url(done)}">{done}</a>'
    assert messages_of(first) == [f"Replayed job {source_link} as this new job."]
    assert replay.reason == "customer asked"
    again = staff.post(replay_url(done), {**fields, "reason": "customer asked"}, follow=True)
    assert messages_of(again) == [f"Already replayed job {source_link} as this new job."]
    assert JobReplay.objects.count() == 1


def test_job_admin__view_only__no_replay_button_and_post_refused(
    client: Client, done: uuid.UUID
) -> None:
    staff = login(client, "view_job")
    assert b"runledger-replay-job" not in staff.get(job_url(done)).content
    assert staff.post(replay_url(done), {"reason": "x"}).status_code == 403
    assert JobReplay.objects.count() == 0


def test_job_admin__replay_refusals__shown_and_nothing_replayed(
    admin_client: Client, done: uuid.UUID
) -> None:
    assert admin_client.get(replay_url(done)).status_code == 405
    blank = admin_client.post(replay_url(done), {"reason": "  "}, follow=True)
    assert messages_of(blank) == ["The job was not replayed: give a reason."]
    stale = admin_client.post(replay_url(done), {"reason": "r", "run_number": "2"}, follow=True)
    assert messages_of(stale) == [
        "The job was not replayed: the job changed since the page was shown."
    ]
    pending = enqueue_job(TEST_JOB_TYPE, {}).job_id
    assert b"runledger-replay-job" not in admin_client.get(job_url(pending)).content
    refused = admin_client.post(replay_url(pending), {"reason": "r"}, follow=True)
    assert messages_of(refused) == [
        "The job was not replayed: only a succeeded job can be replayed."
    ]
    assert JobReplay.objects.count() == 0
