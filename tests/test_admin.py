"""The Django admin through the test client: permissions, browsing, links, metrics, query cost.

Tests that need promoted or conflicted intents use ``django_db(transaction=True)``: promotion
owns its transaction and refuses to run inside the test's atomic block. The rest roll back.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from pytest_django import DjangoAssertNumQueries

from runledger_django import enqueue_job, promote_intents, record_intent
from runledger_django.admin import jobs as runledger_admin
from runledger_django.admin.intents import JobEnqueueIntentAdmin
from runledger_django.admin.shared import BoundedCountPaginator
from runledger_django.domain import ClaimedJob, FailureKind, JobFailure
from runledger_django.models import Job, JobDefinition, JobEnqueueIntent
from runledger_django.services.claim import claim_jobs
from runledger_django.services.lifecycle import complete_job_failure, complete_job_success
from tests.conftest import TEST_JOB_TYPE, MakeDefinition

pytestmark = pytest.mark.django_db

OTHER_JOB_TYPE = "jobs.test.undefined"
ORG = uuid.UUID("0190d3f0-0000-7000-8000-0000000000aa")
INTENTS_URL = reverse("admin:runledger_jobenqueueintent_changelist")
METRICS_URL = reverse("admin:runledger_intent_metrics")
JOBS_URL = reverse("admin:runledger_job_changelist")
DEFINITIONS_URL = reverse("admin:runledger_jobdefinition_changelist")
APP_URL = reverse("admin:app_list", kwargs={"app_label": "runledger"})

StaffClient = Callable[..., Client]


def intent_url(intent_id: uuid.UUID) -> str:
    return reverse("admin:runledger_jobenqueueintent_change", args=(intent_id,))


def job_url(job_id: uuid.UUID) -> str:
    return reverse("admin:runledger_job_change", args=(job_id,))


def listed_ids(response: Any) -> list[uuid.UUID]:
    return [row.id for row in response.context["cl"].result_list]


def record(count: int, *, job_type: str = TEST_JOB_TYPE, **kwargs: Any) -> list[uuid.UUID]:
    return [
        record_intent(job_type, {"n": n}, idempotency_key=f"key-{n}", **kwargs).intent_id
        for n in range(count)
    ]


@pytest.fixture
def staff_client(client: Client) -> StaffClient:
    """Log in a staff user holding exactly the given runledger permission codenames."""

    def login(*codenames: str) -> Client:
        user = User.objects.create_user("staff", is_staff=True)
        permissions = Permission.objects.filter(
            content_type__app_label="runledger", codename__in=codenames
        )
        assert permissions.count() == len(codenames)
        user.user_permissions.add(*permissions)
        client.force_login(user)
        return client

    return login


@dataclass(frozen=True)
class Lifecycle:
    pending: uuid.UUID
    promoted: uuid.UUID
    conflicted: uuid.UUID
    job: uuid.UUID


@pytest.fixture
def lifecycle(make_definition: MakeDefinition) -> Lifecycle:
    """One intent in each state, made by real promotion (needs a transactional test)."""
    make_definition()
    enqueue_job(TEST_JOB_TYPE, {"other": "request"}, idempotency_key="taken")
    conflicted = record_intent(TEST_JOB_TYPE, {"n": 1}, idempotency_key="taken").intent_id
    promoted = record_intent(TEST_JOB_TYPE, {"n": 2}, idempotency_key="fresh").intent_id
    pending = record_intent(OTHER_JOB_TYPE, {"n": 3}, idempotency_key="waiting").intent_id
    report = promote_intents([TEST_JOB_TYPE])
    assert (report.inserted_jobs, report.conflicted) == (1, 1)
    job = JobEnqueueIntent.objects.get(id=promoted).promoted_job_id
    assert job is not None
    return Lifecycle(pending=pending, promoted=promoted, conflicted=conflicted, job=job)


# --- permissions ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", [INTENTS_URL, METRICS_URL, JOBS_URL, DEFINITIONS_URL], ids=lambda u: u.split("/")[-2]
)
def test_admin__anonymous__redirected_to_login(client: Client, url: str) -> None:
    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"] == f"{reverse('admin:login')}?next={url}"


def test_admin__staff_without_intent_permission__forbidden(staff_client: StaffClient) -> None:
    client = staff_client("view_jobdefinition")
    [intent_id] = record(1)

    assert client.get(INTENTS_URL).status_code == 403
    assert client.get(intent_url(intent_id)).status_code == 403
    assert client.get(METRICS_URL).status_code == 403
    app_index = client.get(APP_URL)
    assert app_index.status_code == 200
    assert b"runledger-intent-metrics-link" not in app_index.content


def test_admin__view_only_staff__sees_intents_but_cannot_change_them(
    staff_client: StaffClient,
) -> None:
    client = staff_client("view_jobenqueueintent")
    [intent_id] = record(1)

    assert listed_ids(client.get(INTENTS_URL)) == [intent_id]
    detail = client.get(intent_url(intent_id))
    assert detail.status_code == 200
    assert b'name="_save"' not in detail.content
    assert client.post(intent_url(intent_id), {"job_type": "changed"}).status_code == 403
    assert client.get(reverse("admin:runledger_jobenqueueintent_add")).status_code == 403
    delete_url = reverse("admin:runledger_jobenqueueintent_delete", args=(intent_id,))
    assert client.post(delete_url, {"post": "yes"}).status_code == 403
    assert JobEnqueueIntent.objects.values_list("job_type", flat=True).get() == TEST_JOB_TYPE
    assert client.get(METRICS_URL).status_code == 200
    assert b'id="runledger-intent-metrics-link"' in client.get(APP_URL).content


def test_admin__superuser_with_every_permission__still_cannot_write_intents_or_jobs(
    admin_client: Client, make_definition: MakeDefinition
) -> None:
    make_definition()
    [intent_id] = record(1)
    job_id = enqueue_job(TEST_JOB_TYPE, {}).job_id

    assert admin_client.get(reverse("admin:runledger_jobenqueueintent_add")).status_code == 403
    assert admin_client.get(reverse("admin:runledger_job_add")).status_code == 403
    assert b'name="_save"' not in admin_client.get(intent_url(intent_id)).content
    assert b'name="_save"' not in admin_client.get(job_url(job_id)).content
    assert admin_client.post(job_url(job_id), {"status": "CANCELED"}).status_code == 403


# --- intent changelist -------------------------------------------------------------------------


def test_intent_changelist__superuser__newest_first_with_index_links(
    admin_client: Client,
) -> None:
    ids = record(3)

    response = admin_client.get(INTENTS_URL)

    assert response.status_code == 200
    assert listed_ids(response) == ids[::-1]
    assert f'href="{intent_url(ids[0])}"'.encode() in response.content
    assert f'id="runledger-intent-metrics-link" href="{METRICS_URL}"'.encode() in response.content


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("status", ["PENDING", "PROMOTED", "CONFLICTED"])
def test_intent_changelist__status_filter__only_that_status(
    admin_client: Client, lifecycle: Lifecycle, status: str
) -> None:
    response = admin_client.get(INTENTS_URL, {"status__exact": status})

    expected = {
        "PENDING": lifecycle.pending,
        "PROMOTED": lifecycle.promoted,
        "CONFLICTED": lifecycle.conflicted,
    }[status]
    assert listed_ids(response) == [expected]


def test_intent_changelist__job_type_filter__choices_from_definitions(
    admin_client: Client,
    make_definition: MakeDefinition,
    django_assert_max_num_queries: DjangoAssertNumQueries,
) -> None:
    make_definition()
    defined = record(2)
    undefined = record(1, job_type=OTHER_JOB_TYPE)

    with django_assert_max_num_queries(10) as captured:
        response = admin_client.get(INTENTS_URL, {"job_type": TEST_JOB_TYPE})

    assert listed_ids(response) == defined[::-1]
    [job_type_filter] = [
        spec for spec in response.context["cl"].filter_specs if spec.title == "job type"
    ]
    assert job_type_filter.lookup_choices == [(TEST_JOB_TYPE, TEST_JOB_TYPE)]
    assert not [q["sql"] for q in captured.captured_queries if "DISTINCT" in q["sql"].upper()]
    typed_in = admin_client.get(INTENTS_URL, {"job_type": OTHER_JOB_TYPE})
    assert listed_ids(typed_in) == undefined
    [typed_filter] = [s for s in typed_in.context["cl"].filter_specs if s.title == "job type"]
    assert typed_filter.lookup_choices == [
        (TEST_JOB_TYPE, TEST_JOB_TYPE),
        (OTHER_JOB_TYPE, OTHER_JOB_TYPE),
    ]


def test_intent_changelist__search__exact_key_or_exact_id(admin_client: Client) -> None:
    ids = record(3)
    uuid_key = str(uuid.uuid4())
    [keyed_by_uuid] = [record_intent(TEST_JOB_TYPE, {}, idempotency_key=uuid_key).intent_id]

    assert listed_ids(admin_client.get(INTENTS_URL, {"q": "key-1"})) == [ids[1]]
    assert listed_ids(admin_client.get(INTENTS_URL, {"q": " key-1 "})) == [ids[1]]
    assert listed_ids(admin_client.get(INTENTS_URL, {"q": "key"})) == []
    assert listed_ids(admin_client.get(INTENTS_URL, {"q": "KEY-1"})) == []
    assert listed_ids(admin_client.get(INTENTS_URL, {"q": str(ids[2])})) == [ids[2]]
    assert listed_ids(admin_client.get(INTENTS_URL, {"q": uuid_key})) == [keyed_by_uuid]


def test_intent_changelist__queries__few_and_no_unbounded_count(
    admin_client: Client,
    make_definition: MakeDefinition,
    django_assert_max_num_queries: DjangoAssertNumQueries,
) -> None:
    make_definition()
    record(30)
    record(5, job_type=OTHER_JOB_TYPE, organization_id=ORG)

    for params in ({}, {"status__exact": "PENDING", "job_type": TEST_JOB_TYPE}, {"q": "key-3"}):
        with django_assert_max_num_queries(6) as captured:
            response = admin_client.get(INTENTS_URL, params)
        assert response.status_code == 200
        counts = [
            q["sql"]
            for q in captured.captured_queries
            if "COUNT(" in q["sql"].upper() and "runledger_job_enqueue_intents" in q["sql"]
        ]
        assert counts, "the changelist counts its rows, boundedly"
        assert all(re.search(r"\bLIMIT 10001\b", sql) for sql in counts), counts


def test_intent_changelist__more_rows_than_the_count_bound__capped_and_paged(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(BoundedCountPaginator, "count_bound", 5)
    monkeypatch.setattr(JobEnqueueIntentAdmin, "list_per_page", 2)
    ids = record(7)

    response = admin_client.get(INTENTS_URL)

    cl = response.context["cl"]
    assert (cl.result_count, cl.paginator.num_pages, cl.paginator.count_is_capped) == (5, 3, True)
    assert listed_ids(response) == ids[::-1][:2]
    assert b"runledger-count-capped" in response.content
    assert listed_ids(admin_client.get(INTENTS_URL, {"p": "3"})) == [ids[2]]


# --- intent detail and job pages ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_intent_change__promoted__links_to_its_job_page(
    admin_client: Client, lifecycle: Lifecycle
) -> None:
    detail = admin_client.get(intent_url(lifecycle.promoted))

    link = f'<a class="runledger-promoted-job-link" href="{job_url(lifecycle.job)}">{lifecycle.job}</a>'
    assert link.encode() in detail.content
    assert b"promoted" in detail.content
    job_page = admin_client.get(job_url(lifecycle.job))
    assert job_page.status_code == 200
    assert b"ENQUEUED" in job_page.content  # the events inline
    back = f'href="{INTENTS_URL}?promoted_job={lifecycle.job}"'
    assert back.encode() in job_page.content
    assert listed_ids(admin_client.get(INTENTS_URL, {"promoted_job": str(lifecycle.job)})) == [
        lifecycle.promoted
    ]
    changelist = admin_client.get(INTENTS_URL, {"status__exact": "PROMOTED"})
    assert link.encode() in changelist.content


@pytest.mark.django_db(transaction=True)
def test_intent_change__conflicted__shows_sanitized_error_and_canonical_request(
    admin_client: Client, lifecycle: Lifecycle
) -> None:
    intent = JobEnqueueIntent.objects.get(id=lifecycle.conflicted)

    content = admin_client.get(intent_url(lifecycle.conflicted)).content.decode()

    assert intent.last_error_code == "job.idempotency_conflict"
    assert intent.last_error_message
    assert "job.idempotency_conflict" in content
    assert intent.last_error_message.replace("'", "&#x27;") in content
    assert "conflicted" in content
    assert 'class="runledger-canonical-request"' in content
    assert "&quot;payload&quot;: {\n    &quot;n&quot;: 1\n  }" in content
    assert "runledger-promoted-job-link" not in content


def test_intent_change__unknown_id__redirects_to_changelist(admin_client: Client) -> None:
    response = admin_client.get(intent_url(uuid.uuid4()))

    assert response.status_code == 302
    assert response["Location"] == reverse("admin:index")


def test_job_changelist__superuser__lists_with_filters(
    admin_client: Client, make_definition: MakeDefinition
) -> None:
    make_definition()
    job_id = enqueue_job(TEST_JOB_TYPE, {"x": 1}, idempotency_key="job-key").job_id

    assert listed_ids(admin_client.get(JOBS_URL)) == [job_id]
    assert listed_ids(admin_client.get(JOBS_URL, {"status__exact": "PENDING"})) == [job_id]
    assert listed_ids(admin_client.get(JOBS_URL, {"status__exact": "LEASED"})) == []
    assert listed_ids(admin_client.get(JOBS_URL, {"job_type": TEST_JOB_TYPE})) == [job_id]
    assert listed_ids(admin_client.get(JOBS_URL, {"q": "job-key"})) == [job_id]
    assert listed_ids(admin_client.get(JOBS_URL, {"q": str(job_id)})) == [job_id]


# --- job definitions ---------------------------------------------------------------------------


def test_job_definition_changelist__toggle_is_enabled__saved(
    admin_client: Client, make_definition: MakeDefinition
) -> None:
    make_definition()
    form = {
        "form-TOTAL_FORMS": "1",
        "form-INITIAL_FORMS": "1",
        "form-MIN_NUM_FORMS": "0",
        "form-MAX_NUM_FORMS": "1000",
        "form-0-job_type": TEST_JOB_TYPE,
        "_save": "Save",
    }  # is_enabled unchecked

    response = admin_client.post(DEFINITIONS_URL, form)

    assert response.status_code == 302
    assert JobDefinition.objects.get().is_enabled is False
    admin_client.post(DEFINITIONS_URL, {**form, "form-0-is_enabled": "on"})
    assert JobDefinition.objects.get().is_enabled is True


def test_job_definition_change__defaults_editable_job_type_not(
    admin_client: Client, make_definition: MakeDefinition
) -> None:
    make_definition()
    url = reverse("admin:runledger_jobdefinition_change", args=(TEST_JOB_TYPE,))
    data = {
        "job_type": "renamed",
        "is_enabled": "",
        "max_attempts": "5",
        "default_timeout_seconds": "30",
        "default_priority": "7",
        "version": "2",
    }

    response = admin_client.post(url, data)

    assert response.status_code == 302
    assert list(JobDefinition.objects.values()) == [
        {
            **JobDefinition.objects.values().get(),
            "job_type": TEST_JOB_TYPE,
            "is_enabled": False,
            "max_attempts": 5,
            "default_timeout_seconds": 30,
            "default_priority": 7,
            "version": 2,
        }
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("job_type", "   "),
        ("max_attempts", "0"),
        ("default_timeout_seconds", "-1"),
        ("version", "0"),
    ],
)
def test_job_definition_add__invalid_value__form_error(
    admin_client: Client, field: str, value: str
) -> None:
    data = {
        "job_type": "jobs.new",
        "is_enabled": "on",
        "max_attempts": "3",
        "default_timeout_seconds": "60",
        "default_priority": "100",
        "version": "1",
        field: value,
    }

    response = admin_client.post(reverse("admin:runledger_jobdefinition_add"), data)

    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    assert not JobDefinition.objects.exists()


def test_job_definition_delete__referenced_by_jobs__forbidden(
    admin_client: Client, make_definition: MakeDefinition
) -> None:
    make_definition()
    make_definition(OTHER_JOB_TYPE)
    enqueue_job(TEST_JOB_TYPE, {})

    used = reverse("admin:runledger_jobdefinition_delete", args=(TEST_JOB_TYPE,))
    unused = reverse("admin:runledger_jobdefinition_delete", args=(OTHER_JOB_TYPE,))
    assert admin_client.post(used, {"post": "yes"}).status_code == 403
    assert admin_client.post(unused, {"post": "yes"}).status_code == 302
    assert list(JobDefinition.objects.values_list("job_type", flat=True)) == [TEST_JOB_TYPE]
    assert Job.objects.count() == 1


# --- metrics page ------------------------------------------------------------------------------


def metrics_cells(response: Any) -> dict[str, dict[str, Any]]:
    return {row.job_type: row.to_dict() for row in response.context["rows"]}


def test_intent_metrics_page__reachable_from_the_admin(admin_client: Client) -> None:
    index = admin_client.get(reverse("admin:index")).content.decode()
    app_index = admin_client.get(APP_URL).content.decode()

    assert f'href="{APP_URL}"' in index
    assert f'<a id="runledger-intent-metrics-link" href="{METRICS_URL}">Intent metrics</a>' in (
        app_index
    )


def test_intent_metrics_page__pending_counts_per_scope(admin_client: Client) -> None:
    record(2)
    record(3, job_type=OTHER_JOB_TYPE, organization_id=ORG)

    every = admin_client.get(METRICS_URL)
    only_global = admin_client.get(METRICS_URL, {"scope": "global"})
    only_org = admin_client.get(METRICS_URL, {"scope": "organization", "organization": str(ORG)})

    assert every.status_code == 200
    assert {k: v["pending_count"] for k, v in metrics_cells(every).items()} == {
        TEST_JOB_TYPE: 2,
        OTHER_JOB_TYPE: 3,
    }
    assert list(metrics_cells(only_global)) == [TEST_JOB_TYPE]
    assert list(metrics_cells(only_org)) == [OTHER_JOB_TYPE]
    content = every.content.decode()
    assert content.count('<tr class="intent-metrics-row">') == 2
    assert '<td class="field-pending_count">3</td>' in content
    assert f'href="{INTENTS_URL}?job_type={OTHER_JOB_TYPE}"' in content


def test_intent_metrics_page__bad_scope__form_error_and_no_rows(admin_client: Client) -> None:
    record(1)

    missing_org = admin_client.get(METRICS_URL, {"scope": "organization"})
    bad_org = admin_client.get(METRICS_URL, {"scope": "organization", "organization": "nope"})

    assert missing_org.context["form"].errors == {
        "organization": ["Enter the organization id to show."]
    }
    assert "organization" in bad_org.context["form"].errors
    assert missing_org.context["rows"] == bad_org.context["rows"] == []


def test_intent_metrics_page__nothing_recorded__empty_state(admin_client: Client) -> None:
    response = admin_client.get(METRICS_URL)

    assert b'id="intent-metrics-empty"' in response.content


@pytest.mark.django_db(transaction=True)
def test_intent_metrics_page__terminal_counts(admin_client: Client, lifecycle: Lifecycle) -> None:
    response = admin_client.get(METRICS_URL, {"job_type": TEST_JOB_TYPE})

    [row] = response.context["rows"]
    assert (row.pending_count, row.promoted_24h, row.conflicted_24h) == (0, 1, 1)
    assert '<td class="field-conflicted_24h">1</td>' in response.content.decode()


def test_admin_index__lists_intent_metrics__entry_opens_the_metrics_page(
    admin_client: Client,
) -> None:
    """The metrics page is one click from the admin index (a proxy model's entry)."""
    index = admin_client.get("/admin/")
    assert b"model-intentmetricspage" in index.content
    entry = admin_client.get("/admin/runledger/intentmetricspage/")
    assert entry.status_code == 302
    assert entry["Location"] == "/admin/runledger/jobenqueueintent/metrics/"


def test_admin_index__metrics_entry_hidden_without_intent_view_permission(
    client: Client, django_user_model: Any
) -> None:
    user = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(user)
    assert b"model-intentmetricspage" not in client.get("/admin/").content
    assert client.get("/admin/runledger/intentmetricspage/").status_code == 403


# --- jobs: permissions, actions, dead letters, attempts, metrics -------------------------------

JOB_METRICS_URL = reverse("admin:runledger_job_metrics")
DEAD_LETTERS_URL = f"{JOBS_URL}?status__exact=DEAD_LETTERED"


def cancel_url(job_id: uuid.UUID) -> str:
    return reverse("admin:runledger_job_cancel", args=(job_id,))


def requeue_url(job_id: uuid.UUID) -> str:
    return reverse("admin:runledger_job_requeue", args=(job_id,))


def leased_job(payload: dict[str, Any] | None = None, **kwargs: Any) -> ClaimedJob:
    """Enqueue a job and lease it, through the services; return the claimed job."""
    job_id = enqueue_job(TEST_JOB_TYPE, payload or {}, **kwargs).job_id
    [claimed] = claim_jobs([TEST_JOB_TYPE], worker_id="admin-test", limit=1, lease_seconds=60)
    assert claimed.lease.job_id == job_id
    return claimed


def dead_letter(payload: dict[str, Any] | None = None) -> uuid.UUID:
    """A job whose only attempt failed terminally, with an exception class and traceback."""
    claimed = leased_job(payload or {"order": 1})
    failure = JobFailure(
        kind=FailureKind.TERMINAL,
        code="job.terminal_failure",
        message="the card was declined",
        error_class="shop.errors.CardDeclinedError",
        traceback="Traceback (most recent call last):\n  ...\nCardDeclinedError: declined",
    )
    complete_job_failure(claimed.lease, failure)
    return claimed.lease.job_id


def succeeded(output: Any) -> uuid.UUID:
    claimed = leased_job({"order": 2})
    complete_job_success(claimed.lease, output=output)
    return claimed.lease.job_id


def job_status(job_id: uuid.UUID) -> str:
    return Job.objects.values_list("status", flat=True).get(id=job_id)


def post_action(client: Client, action: str, job_ids: list[uuid.UUID], url: str = JOBS_URL) -> Any:
    data = {"action": action, "_selected_action": [str(job_id) for job_id in job_ids]}
    return client.post(url, data, follow=True)


def action_names(response: Any) -> list[str]:
    form = response.context["action_form"]
    return [] if form is None else [name for name, _ in form.fields["action"].choices if name]


def shown_messages(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


@pytest.fixture
def jobs_in_every_state(make_definition: MakeDefinition) -> dict[str, uuid.UUID]:
    make_definition(max_attempts=1)
    return {
        "dead": dead_letter(),
        "succeeded": succeeded({"sent_to": "ada@example.com"}),
        "pending": enqueue_job(TEST_JOB_TYPE, {"order": 3}).job_id,
    }


@pytest.mark.parametrize(
    "url", [JOB_METRICS_URL, DEAD_LETTERS_URL, "/admin/runledger/jobmetricspage/"]
)
def test_job_admin__anonymous__redirected_to_login(client: Client, url: str) -> None:
    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"].startswith(f"{reverse('admin:login')}?next=")


def test_job_admin__anonymous_posts_an_action__redirected_and_nothing_changes(
    client: Client, jobs_in_every_state: dict[str, uuid.UUID]
) -> None:
    dead = jobs_in_every_state["dead"]

    direct = client.post(requeue_url(dead))
    bulk = client.post(JOBS_URL, {"action": "requeue_selected_jobs", "_selected_action": [dead]})

    assert direct.status_code == bulk.status_code == 302
    assert direct["Location"].startswith(reverse("admin:login"))
    assert job_status(dead) == "DEAD_LETTERED"


def test_job_admin__staff_without_job_permission__forbidden_everywhere(
    staff_client: StaffClient, jobs_in_every_state: dict[str, uuid.UUID]
) -> None:
    client = staff_client("view_jobdefinition")
    dead = jobs_in_every_state["dead"]

    for url in (JOBS_URL, DEAD_LETTERS_URL, job_url(dead), JOB_METRICS_URL):
        assert client.get(url).status_code == 403, url
    assert client.get("/admin/runledger/deadletter/").status_code == 403
    assert client.get("/admin/runledger/jobmetricspage/").status_code == 403
    assert client.post(requeue_url(dead)).status_code == 403
    assert post_action(client, "requeue_selected_jobs", [dead]).status_code == 403
    index = client.get("/admin/").content
    assert b"model-deadletter" not in index and b"model-jobmetricspage" not in index
    assert b"runledger-job-metrics-link" not in client.get(APP_URL).content
    assert job_status(dead) == "DEAD_LETTERED"


def test_job_admin__view_only_staff__browses_but_cannot_cancel_or_requeue(
    staff_client: StaffClient, jobs_in_every_state: dict[str, uuid.UUID]
) -> None:
    client = staff_client("view_job")
    dead, pending = jobs_in_every_state["dead"], jobs_in_every_state["pending"]

    changelist = client.get(JOBS_URL)
    assert set(listed_ids(changelist)) == set(jobs_in_every_state.values())
    assert action_names(changelist) == []
    page = client.get(job_url(dead))
    assert page.status_code == 200
    assert b"runledger-requeue-job" not in page.content
    assert b"runledger-cancel-job" not in client.get(job_url(pending)).content
    assert client.post(requeue_url(dead)).status_code == 403
    assert client.post(cancel_url(pending)).status_code == 403
    ignored = post_action(client, "requeue_selected_jobs", [dead])  # no actions: a plain list
    assert (ignored.status_code, shown_messages(ignored)) == (200, [])
    assert client.get(JOB_METRICS_URL).status_code == 200
    assert b"model-deadletter" in client.get("/admin/").content
    assert (job_status(dead), job_status(pending)) == ("DEAD_LETTERED", "PENDING")


def test_job_admin__view_and_cancel_but_not_requeue__only_cancel_offered(
    staff_client: StaffClient, jobs_in_every_state: dict[str, uuid.UUID]
) -> None:
    client = staff_client("view_job", "cancel_job")
    dead, pending = jobs_in_every_state["dead"], jobs_in_every_state["pending"]

    assert action_names(client.get(JOBS_URL)) == ["cancel_selected_jobs"]
    assert b"runledger-requeue-job" not in client.get(job_url(dead)).content
    assert b"runledger-cancel-job" in client.get(job_url(pending)).content
    assert client.post(requeue_url(dead)).status_code == 403
    post_action(client, "requeue_selected_jobs", [dead])
    assert job_status(dead) == "DEAD_LETTERED"

    canceled = client.post(cancel_url(pending), follow=True)

    assert canceled.redirect_chain == [(job_url(pending), 302)]
    assert shown_messages(canceled) == ["Canceled 1 job."]
    assert job_status(pending) == "CANCELED"


def test_job_admin__requeue_permission__dead_letter_requeued_from_the_list(
    staff_client: StaffClient, jobs_in_every_state: dict[str, uuid.UUID]
) -> None:
    client = staff_client("view_job", "requeue_job")
    dead, done = jobs_in_every_state["dead"], jobs_in_every_state["succeeded"]

    assert action_names(client.get(JOBS_URL)) == ["requeue_selected_jobs"]
    response = post_action(client, "requeue_selected_jobs", [dead, done])

    assert shown_messages(response) == [
        "Requeued 1 job.",
        "1 job was not requeued: not in a state that allows it.",
    ]
    assert Job.objects.values("status", "run_number", "attempt").get(id=dead) == {
        "status": "PENDING",
        "run_number": 2,
        "attempt": 0,
    }
    assert job_status(done) == "SUCCEEDED"


def test_job_admin__requeue_button__on_the_dead_letter_page(
    admin_client: Client, jobs_in_every_state: dict[str, uuid.UUID]
) -> None:
    dead = jobs_in_every_state["dead"]
    page = admin_client.get(job_url(dead)).content.decode()
    assert f'action="{requeue_url(dead)}"' in page
    assert "runledger-cancel-job" not in page

    response = admin_client.post(requeue_url(dead), follow=True)

    assert shown_messages(response) == ["Requeued 1 job."]
    assert job_status(dead) == "PENDING"
    assert admin_client.get(requeue_url(dead)).status_code == 405
    again = admin_client.post(requeue_url(dead), follow=True)
    assert shown_messages(again) == ["1 job was not requeued: not in a state that allows it."]


def test_job_admin__action_over_the_limit__refused_whole(
    admin_client: Client,
    jobs_in_every_state: dict[str, uuid.UUID],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runledger_admin, "ACTION_LIMIT", 1)
    dead, pending = jobs_in_every_state["dead"], jobs_in_every_state["pending"]

    response = post_action(admin_client, "cancel_selected_jobs", [dead, pending])

    assert shown_messages(response) == [
        "Select at most 1 jobs for one cancel; nothing was changed. "
        "Narrow the list with a filter first."
    ]
    assert (job_status(dead), job_status(pending)) == ("DEAD_LETTERED", "PENDING")


def test_dead_letters__one_click_from_the_admin_index(
    admin_client: Client, jobs_in_every_state: dict[str, uuid.UUID]
) -> None:
    index = admin_client.get("/admin/").content.decode()
    assert "model-deadletter" in index
    entry = admin_client.get("/admin/runledger/deadletter/")
    assert entry.status_code == 302
    assert entry["Location"] == DEAD_LETTERS_URL

    listed = admin_client.get(entry["Location"])

    assert listed_ids(listed) == [jobs_in_every_state["dead"]]
    assert 'id="runledger-dead-letters-link"' in admin_client.get(APP_URL).content.decode()


def test_job_change__attempts_events_payload_and_output_read_only(
    admin_client: Client, jobs_in_every_state: dict[str, uuid.UUID]
) -> None:
    dead, done = jobs_in_every_state["dead"], jobs_in_every_state["succeeded"]

    page = admin_client.get(job_url(dead))
    content = page.content.decode()

    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    assert "Attempts (newest 100)" in content
    for text in (
        "DEAD_LETTERED",
        "TERMINAL",
        "job.terminal_failure",
        "the card was declined",
        '<details class="runledger-traceback"><summary>shop.errors.CardDeclinedError</summary>',
        "CardDeclinedError: declined",
        "ENQUEUED",
        "LEASED",
        "FAILED",
        '<pre class="runledger-job-payload">{\n  &quot;order&quot;: 1\n}</pre>',
    ):
        assert text in content, text
    output = admin_client.get(job_url(done)).content.decode()
    assert '<pre class="runledger-job-output">{\n  &quot;sent_to&quot;: ' in output
    assert admin_client.post(job_url(done), {"payload": "{}"}).status_code == 403


def test_job_changelist__dead_letter_filter__queries_bounded(
    admin_client: Client,
    jobs_in_every_state: dict[str, uuid.UUID],
    django_assert_max_num_queries: DjangoAssertNumQueries,
) -> None:
    for params in ({}, {"status__exact": "DEAD_LETTERED"}, {"q": str(uuid.uuid4())}):
        with django_assert_max_num_queries(8) as captured:
            response = admin_client.get(JOBS_URL, params)
        assert response.status_code == 200
        counts = [
            q["sql"]
            for q in captured.captured_queries
            if "COUNT(" in q["sql"].upper() and "runledger_job_queue" in q["sql"]
        ]
        assert counts, "the changelist counts its rows, boundedly"
        assert all(re.search(r"\bLIMIT 10001\b", sql) for sql in counts), counts


def test_job_metrics_page__rows_per_scope_with_links(
    admin_client: Client, jobs_in_every_state: dict[str, uuid.UUID]
) -> None:
    enqueue_job(TEST_JOB_TYPE, {}, organization_id=ORG)

    every = admin_client.get(JOB_METRICS_URL)
    only_org = admin_client.get(
        JOB_METRICS_URL, {"scope": "organization", "organization": str(ORG)}
    )

    [row] = every.context["rows"]
    assert (row.due_count, row.succeeded_24h, row.dead_lettered_24h) == (2, 1, 1)
    assert [r.due_count for r in only_org.context["rows"]] == [1]
    content = every.content.decode()
    assert content.count('<tr class="job-metrics-row">') == 1
    dead_link = f'href="{JOBS_URL}?job_type={TEST_JOB_TYPE}&amp;status__exact=DEAD_LETTERED"'
    assert dead_link in content
    assert (
        f'id="runledger-job-metrics-link" href="{JOB_METRICS_URL}"'
        in admin_client.get(JOBS_URL).content.decode()
    )


def test_job_metrics_page__nothing_running__empty_state(admin_client: Client) -> None:
    assert b'id="job-metrics-empty"' in admin_client.get(JOB_METRICS_URL).content


def test_admin_index__job_metrics_entry__opens_the_metrics_page(admin_client: Client) -> None:
    assert b"model-jobmetricspage" in admin_client.get("/admin/").content
    entry = admin_client.get("/admin/runledger/jobmetricspage/")
    assert (entry.status_code, entry["Location"]) == (302, JOB_METRICS_URL)
