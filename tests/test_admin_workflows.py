"""The workflow runs' admin through the test client, on runs made by ``start_workflow``:
changelist, filters, search, a run's page with its graph and steps, permissions, query cost."""

from __future__ import annotations

import re
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.db.models.functions import Now
from django.test import Client
from django.urls import reverse
from pytest_django import DjangoAssertNumQueries

from runledger_django import Workflow, start_workflow
from runledger_django.admin import workflows as workflow_admin
from runledger_django.models import Job, WorkflowRun, WorkflowStep
from runledger_django.services.claim import claim_jobs
from runledger_django.services.lifecycle import complete_job_success
from tests.conftest import MakeDefinition

pytestmark = pytest.mark.django_db

CHARGE = "shop.charge"
SHIP = "shop.ship"
RUNS_URL = reverse("admin:runledger_workflowrun_changelist")
SVG = "{http://www.w3.org/2000/svg}"

StaffClient = Callable[..., Client]


def run_url(run_id: uuid.UUID) -> str:
    return reverse("admin:runledger_workflowrun_change", args=(run_id,))


def listed_ids(response: Any) -> list[uuid.UUID]:
    return [row.id for row in response.context["cl"].result_list]


@pytest.fixture
def definitions(make_definition: MakeDefinition) -> None:
    make_definition(CHARGE)
    make_definition(SHIP)


@pytest.fixture
def staff_client(client: Client) -> StaffClient:
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


def fulfil(order: int, workflow_type: str = "orders.fulfil", **start: Any) -> uuid.UUID:
    """charge and reserve, ship after both, notify whatever happened."""
    flow = Workflow(workflow_type)
    charge = flow.step("charge", CHARGE, {"order": order})
    reserve = flow.step("reserve", SHIP, {"order": order})
    ship = flow.step("ship", SHIP, {"order": order}, after=[charge, reserve])
    flow.step("notify", SHIP, {"order": order}, after=[ship], when="terminal")
    return start_workflow(flow, **start).run_id


def fan(width: int, key: str) -> uuid.UUID:
    flow = Workflow("reports.build")
    split = flow.step("split", CHARGE)
    parts = [flow.step(f"part-{n}", SHIP, {"n": n}, after=[split]) for n in range(width)]
    flow.chord(parts, flow.step("merge", CHARGE))
    return start_workflow(flow, idempotency_key=key).run_id


def set_step(run_id: uuid.UUID, key: str, status: str, **fields: Any) -> None:
    WorkflowStep.objects.filter(workflow_run_id=run_id, step_key=key).update(
        status=status, **fields
    )


def set_run(run_id: uuid.UUID, status: str) -> None:
    WorkflowRun.objects.filter(id=run_id).update(status=status, finished_at=Now())


def graph_of(response: Any) -> ET.Element:
    match = re.search(
        r'<svg xmlns="http://www.w3.org/2000/svg" class="runledger-workflow-graph".*?</svg>',
        response.content.decode(),
        re.S,
    )
    assert match, "the run's page draws its graph"
    return ET.fromstring(match.group(0))  # noqa: S314  (our own page)


def nodes_of(svg: ET.Element) -> dict[str, ET.Element]:
    return {
        str(element.get("data-step")): element
        for element in svg.iter()
        if "wf-node" in (element.get("class") or "").split()
    }


# --- permissions ------------------------------------------------------------------------------


def test_runs__anonymous__redirected_to_login(client: Client) -> None:
    response = client.get(RUNS_URL)

    assert response.status_code == 302
    assert response["Location"] == f"{reverse('admin:login')}?next={RUNS_URL}"


def test_runs__staff_without_view_permission__forbidden(
    staff_client: StaffClient, definitions: None
) -> None:
    run_id = fulfil(1)
    client = staff_client("view_job")

    assert client.get(RUNS_URL).status_code == 403
    assert client.get(run_url(run_id)).status_code == 403


def test_runs__view_permission__browses_but_cannot_change_or_delete(
    staff_client: StaffClient, definitions: None
) -> None:
    run_id = fulfil(1)
    client = staff_client("view_workflowrun")

    assert listed_ids(client.get(RUNS_URL)) == [run_id]
    page = client.get(run_url(run_id))
    assert page.status_code == 200
    assert page.context["has_change_permission"] is False
    assert client.post(run_url(run_id), {"status": "CANCELED"}).status_code == 403
    delete = reverse("admin:runledger_workflowrun_delete", args=(run_id,))
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert WorkflowRun.objects.filter(id=run_id, status="RUNNING").exists()


def test_runs__app_index_lists_workflow_runs(admin_client: Client) -> None:
    response = admin_client.get(reverse("admin:app_list", kwargs={"app_label": "runledger"}))

    assert 'class="model-workflowrun' in response.content.decode()


# --- changelist ---------------------------------------------------------------------------------


def test_changelist__newest_first_with_progress_from_counters(
    admin_client: Client, definitions: None
) -> None:
    first, second = fulfil(1), fulfil(2)

    response = admin_client.get(RUNS_URL)

    assert listed_ids(response) == [second, first]
    content = response.content.decode()
    assert "0 of 4 succeeded, 4 to go" in content
    assert "orders.fulfil" in content


def test_changelist__status_and_type_filters(admin_client: Client, definitions: None) -> None:
    running = fulfil(1)
    other_type = fulfil(2, workflow_type="orders.refund")
    done = fulfil(3)
    set_run(done, "SUCCEEDED")

    by_status = admin_client.get(RUNS_URL, {"status__exact": "SUCCEEDED"})
    by_type = admin_client.get(RUNS_URL, {"workflow_type": "orders.refund"})
    both = admin_client.get(
        RUNS_URL, {"status__exact": "RUNNING", "workflow_type": "orders.fulfil"}
    )

    assert listed_ids(by_status) == [done]
    assert listed_ids(by_type) == [other_type]
    assert listed_ids(both) == [running]
    [type_filter] = [s for s in by_type.context["cl"].filter_specs if s.title == "workflow type"]
    assert type_filter.lookup_choices == [
        ("orders.fulfil", "orders.fulfil"),
        ("orders.refund", "orders.refund"),
    ]
    typed = admin_client.get(RUNS_URL, {"workflow_type": "never.started"})
    assert listed_ids(typed) == []


def test_changelist__search__exact_idempotency_key_or_run_id(
    admin_client: Client, definitions: None
) -> None:
    keyed = fulfil(1, idempotency_key="fulfil:1")
    tenant = fulfil(2, idempotency_key="fulfil:2", organization_id=uuid.uuid4())
    unkeyed = fulfil(3)

    assert listed_ids(admin_client.get(RUNS_URL, {"q": "fulfil:1"})) == [keyed]
    assert listed_ids(admin_client.get(RUNS_URL, {"q": " fulfil:2 "})) == [tenant]
    assert listed_ids(admin_client.get(RUNS_URL, {"q": "fulfil"})) == []
    assert listed_ids(admin_client.get(RUNS_URL, {"q": str(unkeyed)})) == [unkeyed]
    refund = fulfil(4, workflow_type="orders.refund", idempotency_key="fulfil:1")
    assert listed_ids(admin_client.get(RUNS_URL, {"q": "fulfil:1"})) == [refund, keyed]
    in_type = {"q": "fulfil:1", "workflow_type": "orders.refund"}
    assert listed_ids(admin_client.get(RUNS_URL, in_type)) == [refund]


def test_changelist__queries__few_and_no_unbounded_count(
    admin_client: Client,
    definitions: None,
    django_assert_max_num_queries: DjangoAssertNumQueries,
) -> None:
    for order in range(12):
        fulfil(order, idempotency_key=f"fulfil:{order}")

    for params in (
        {},
        {"status__exact": "RUNNING", "workflow_type": "orders.fulfil"},
        {"q": "fulfil:3"},
    ):
        with django_assert_max_num_queries(8) as captured:
            response = admin_client.get(RUNS_URL, params)
        assert response.status_code == 200
        sqls = [q["sql"] for q in captured.captured_queries]
        counts = [s for s in sqls if "COUNT(" in s.upper() and "runledger_workflow_runs" in s]
        assert counts, "the changelist counts its rows, boundedly"
        assert all(re.search(r"\bLIMIT 10001\b", sql) for sql in counts), counts
        assert not [s for s in sqls if "DISTINCT" in s.upper()]
        assert not [s for s in sqls if "runledger_workflow_steps" in s], "counters, not counts"


# --- a run's page -------------------------------------------------------------------------------


def test_run_page__graph_has_a_node_per_step_and_an_edge_per_dependency(
    admin_client: Client, definitions: None
) -> None:
    run_id = fulfil(1)

    response = admin_client.get(run_url(run_id))

    assert response.status_code == 200
    svg = graph_of(response)
    nodes = nodes_of(svg)
    assert sorted(nodes) == ["charge", "notify", "reserve", "ship"]
    edges = {
        (e.get("data-from"), e.get("data-to")): e.get("class")
        for e in svg.iter(f"{SVG}path")
        if "wf-edge" in (e.get("class") or "")
    }
    assert edges == {
        ("charge", "ship"): "wf-edge wf-edge-success",
        ("reserve", "ship"): "wf-edge wf-edge-success",
        ("ship", "notify"): "wf-edge wf-edge-terminal",
    }
    title = svg.find(f"{SVG}title")
    assert title is not None and title.text == f"Steps of orders.fulfil run {run_id}"


def test_run_page__steps_link_to_their_jobs_and_running_comes_from_the_lease(
    admin_client: Client, definitions: None
) -> None:
    run_id = fulfil(1)
    [claimed] = claim_jobs([CHARGE], worker_id="w1", limit=1, lease_seconds=60)
    steps = {s.step_key: s for s in WorkflowStep.objects.filter(workflow_run_id=run_id)}

    response = admin_client.get(run_url(run_id))

    nodes = nodes_of(graph_of(response))
    charge_job = reverse("admin:runledger_job_change", args=(steps["charge"].job_id,))
    assert claimed.lease.job_id == steps["charge"].job_id
    assert nodes["charge"].get("href") == charge_job
    assert nodes["charge"].get("data-status") == "RUNNING"
    assert nodes["reserve"].get("data-status") == "ENQUEUED"
    assert nodes["ship"].get("data-status") == "BLOCKED"
    assert nodes["ship"].get("href") is None
    rows = {row.key: row for row in response.context["runledger_steps"]}
    assert rows["charge"].status == "RUNNING" and rows["charge"].job_href == charge_job
    assert rows["charge"].attempts == "1 of 3"
    assert rows["ship"].prerequisites == "0 of 2 finished"
    content = response.content.decode()
    assert f'<a class="runledger-step-job" href="{charge_job}">' in content
    assert content.count('<tr class="runledger-workflow-step"') == 4


def test_run_page__statuses_coloured_and_written(admin_client: Client, definitions: None) -> None:
    run_id = fulfil(1)
    set_step(run_id, "charge", "SUCCEEDED")
    set_step(run_id, "reserve", "FAILED", last_error_code="warehouse.out_of_stock")
    set_step(run_id, "ship", "CANCELED", status_reason="workflow.dependency_unsatisfied")
    set_run(run_id, "COMPLETED_WITH_ERRORS")

    response = admin_client.get(run_url(run_id))

    nodes = nodes_of(graph_of(response))
    assert {key: node.get("class") for key, node in nodes.items()} == {
        "charge": "wf-node wf-status-succeeded",
        "reserve": "wf-node wf-status-failed",
        "ship": "wf-node wf-status-canceled",
        "notify": "wf-node wf-status-blocked",
    }
    content = response.content.decode()
    assert "warehouse.out_of_stock" in content
    assert "workflow.dependency_unsatisfied" in content
    assert "var(--message-error-bg" in content  # colours follow the admin's theme variables


def test_run_page__external_gate_waiting__drawn_without_a_link(
    admin_client: Client, definitions: None
) -> None:
    flow = Workflow("orders.large")
    approve = flow.external("approve")
    flow.step("ship", SHIP, after=[approve])
    run_id = start_workflow(flow).run_id

    response = admin_client.get(run_url(run_id))

    nodes = nodes_of(graph_of(response))
    assert nodes["approve"].get("data-status") == "WAITING_FOR_EXTERNAL"
    assert nodes["approve"].get("href") is None
    assert [t.text for t in nodes["approve"].iter(f"{SVG}text")] == [
        "approve",
        "waiting (external)",
    ]
    rows = {row.key: row for row in response.context["runledger_steps"]}
    assert (rows["approve"].kind, rows["approve"].job_type) == ("EXTERNAL", None)


def test_run_page__hostile_step_keys_are_escaped(admin_client: Client, definitions: None) -> None:
    flow = Workflow("<img src=x onerror=alert(1)>")
    first = flow.step('<script>alert("k")</script>', CHARGE)
    flow.step("then & after", SHIP, after=[first])
    run_id = start_workflow(flow).run_id

    response = admin_client.get(run_url(run_id))

    content = response.content.decode()
    assert "<script>alert" not in content
    assert "<img src=x" not in content
    assert sorted(nodes_of(graph_of(response))) == ['<script>alert("k")</script>', "then & after"]


def test_run_page__queries_bounded_whatever_the_graph(
    admin_client: Client,
    definitions: None,
    django_assert_max_num_queries: DjangoAssertNumQueries,
) -> None:
    small, large = fan(3, "fan:3"), fan(40, "fan:40")

    with django_assert_max_num_queries(14) as few:
        assert admin_client.get(run_url(small)).status_code == 200
    with django_assert_max_num_queries(len(few.captured_queries)) as many:
        response = admin_client.get(run_url(large))
    assert len(nodes_of(graph_of(response))) == 42
    edge_reads = [
        q["sql"]
        for q in many.captured_queries
        if 'FROM "runledger_workflow_step_dependencies"' in q["sql"]
    ]
    # The edge table has no index on its run: edges are read by their prerequisites.
    assert len(edge_reads) == 1 and '"prerequisite_step_id" IN' in edge_reads[0], edge_reads


def test_run_page__too_many_steps_to_draw__listed_not_drawn(
    admin_client: Client, definitions: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workflow_admin, "GRAPH_MAX_STEPS", 5)
    monkeypatch.setattr(workflow_admin, "STEPS_SHOWN", 6)
    run_id = fan(10, "fan:10")

    response = admin_client.get(run_url(run_id))

    content = response.content.decode()
    assert '<div class="runledger-workflow-graph-box">' not in content
    assert "more than 5 steps" in content
    assert "Steps (the first 6)" in content
    assert content.count('<tr class="runledger-workflow-step"') == 6


def test_run_page__a_job_removed_by_retention__step_still_listed(
    admin_client: Client, definitions: None
) -> None:
    run_id = fulfil(1)
    charge = WorkflowStep.objects.get(workflow_run_id=run_id, step_key="charge")
    assert charge.job_id is not None
    Job.objects.filter(id=charge.job_id).delete()

    response = admin_client.get(run_url(run_id))

    assert response.status_code == 200
    rows = {row.key: row for row in response.context["runledger_steps"]}
    assert rows["charge"].job_href is None


# --- cancel and retry ---------------------------------------------------------------------------


def cancel_url(run_id: uuid.UUID) -> str:
    return reverse("admin:runledger_workflowrun_cancel", args=(run_id,))


def retry_url(run_id: uuid.UUID) -> str:
    return reverse("admin:runledger_workflowrun_retry", args=(run_id,))


def statuses(run_id: uuid.UUID) -> dict[str, str]:
    return dict(
        WorkflowStep.objects.filter(workflow_run_id=run_id).values_list("step_key", "status")
    )


def test_buttons__offered_by_permission_and_status(
    staff_client: StaffClient, definitions: None
) -> None:
    running = fulfil(1)
    viewer = staff_client("view_workflowrun")
    page = viewer.get(run_url(running)).content.decode()
    assert "runledger-cancel-run" not in page and "runledger-retry-run" not in page

    operator = User.objects.create_user("operator", is_staff=True)
    operator.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["view_workflowrun", "cancel_workflowrun", "retry_workflowrun"]
        )
    )
    viewer.force_login(operator)
    page = viewer.get(run_url(running)).content.decode()
    assert 'id="runledger-cancel-run"' in page
    assert "runledger-retry-run" not in page  # a running run cannot be retried


def test_cancel_button__needs_post_and_its_permission(
    staff_client: StaffClient, definitions: None
) -> None:
    run_id = fulfil(1)
    client = staff_client("view_workflowrun", "retry_workflowrun")

    assert client.get(cancel_url(run_id)).status_code == 405
    assert client.post(cancel_url(run_id)).status_code == 403
    assert WorkflowRun.objects.get(id=run_id).status == "RUNNING"


def test_cancel_button__cancels_every_unfinished_step(
    staff_client: StaffClient, definitions: None
) -> None:
    run_id = fulfil(1)
    client = staff_client("view_workflowrun", "cancel_workflowrun")

    response = client.post(cancel_url(run_id), follow=True)

    assert response.redirect_chain == [(run_url(run_id), 302)]
    assert WorkflowRun.objects.get(id=run_id).status == "CANCELED"
    assert set(statuses(run_id).values()) == {"CANCELED"}
    assert "Canceled 1 workflow run." in response.content.decode()
    assert not Job.objects.filter(status="PENDING").exists()
    [entry] = LogEntry.objects.filter(object_id=str(run_id))
    assert entry.get_change_message() == "Canceled (admin action)"
    page = response.content.decode()
    assert "runledger-cancel-run" not in page  # nothing left to cancel


def test_cancel_action__selection__each_run_reported(
    staff_client: StaffClient, definitions: None
) -> None:
    first, second = fulfil(1), fulfil(2)
    flow = Workflow("orders.single")
    flow.step("only", CHARGE)
    done = start_workflow(flow).run_id
    for claimed in claim_jobs([CHARGE], worker_id="w1", limit=3, lease_seconds=60):
        if claimed.lease.workflow_step_id in WorkflowStep.objects.filter(
            workflow_run_id=done
        ).values_list("id", flat=True):
            complete_job_success(claimed.lease, output={"ok": True})
    assert WorkflowRun.objects.get(id=done).status == "SUCCEEDED"
    client = staff_client("view_workflowrun", "cancel_workflowrun")

    response = client.post(
        RUNS_URL,
        {
            "action": "cancel_selected_runs",
            "_selected_action": [str(first), str(second), str(done)],
        },
        follow=True,
    )

    content = response.content.decode()
    assert WorkflowRun.objects.get(id=first).status == "CANCELED"
    assert WorkflowRun.objects.get(id=second).status == "CANCELED"
    assert WorkflowRun.objects.get(id=done).status == "SUCCEEDED"
    assert "Canceled 2 workflow runs." in content
    assert "1 workflow run was not canceled: it had already succeeded." in content


def test_cancel_action__without_permission__not_offered(
    staff_client: StaffClient, definitions: None
) -> None:
    run_id = fulfil(1)
    client = staff_client("view_workflowrun")

    response = client.get(RUNS_URL)
    assert "cancel_selected_runs" not in response.content.decode()
    client.post(RUNS_URL, {"action": "cancel_selected_runs", "_selected_action": [str(run_id)]})
    assert WorkflowRun.objects.get(id=run_id).status == "RUNNING"


def test_retry_button__makes_one_recovery_run_and_opens_it(
    staff_client: StaffClient, definitions: None
) -> None:
    run_id = fulfil(1)
    client = staff_client("view_workflowrun", "cancel_workflowrun", "retry_workflowrun")
    client.post(cancel_url(run_id))
    assert 'id="runledger-retry-run"' in client.get(run_url(run_id)).content.decode()

    first = client.post(retry_url(run_id), follow=True)
    again = client.post(retry_url(run_id), follow=True)

    [recovery] = WorkflowRun.objects.exclude(id=run_id).values_list("id", flat=True)
    assert first.redirect_chain == [(run_url(recovery), 302)]
    assert again.redirect_chain == [(run_url(recovery), 302)]
    assert "Retried 1 workflow run." in first.content.decode()
    assert "it had already been retried" in again.content.decode()
    assert WorkflowRun.objects.get(id=recovery).status == "RUNNING"
    assert WorkflowRun.objects.get(id=run_id).status == "CANCELED"  # the source is untouched
    assert statuses(recovery) == {
        "charge": "ENQUEUED",
        "reserve": "ENQUEUED",
        "ship": "BLOCKED",
        "notify": "BLOCKED",
    }
    page = first.content.decode()
    assert f'class="runledger-recovered-from" href="{run_url(run_id)}"' in page
    source_page = client.get(run_url(run_id)).content.decode()
    assert f'class="runledger-recovery-run" href="{run_url(recovery)}"' in source_page


def test_retry_button__running_run__refused_with_the_reason(
    staff_client: StaffClient, definitions: None
) -> None:
    run_id = fulfil(1)
    client = staff_client("view_workflowrun", "retry_workflowrun")

    assert client.get(retry_url(run_id)).status_code == 405
    response = client.post(retry_url(run_id), follow=True)

    assert response.redirect_chain == [(run_url(run_id), 302)]
    assert (
        "1 workflow run was not retried: not finished, or it succeeded."
        in response.content.decode()
    )
    assert WorkflowRun.objects.count() == 1


def test_retry_button__without_permission__forbidden(
    staff_client: StaffClient, definitions: None
) -> None:
    run_id = fulfil(1)
    client = staff_client("view_workflowrun", "cancel_workflowrun")
    client.post(cancel_url(run_id))

    assert client.post(retry_url(run_id)).status_code == 403
    assert WorkflowRun.objects.count() == 1
