"""What the PgBouncer tests do from a process whose only database is PgBouncer.

Run as ``python -m tests.pgbouncer.client STEPS`` with tests.pgbouncer.settings, STEPS being a
JSON list of ``[action, argument]`` pairs run in order in one process (a Django start costs
more than most steps); prints a JSON list of their results for the test to assert on.

- ``checkout {"orders": N, "threads": T}``: N checkouts through Django's test Client on the
  example shop's view, spread over T threads (each with its own connection, so there are more
  clients than PgBouncer has server connections), each retried identically once; then one
  checkout that fails after recording and must leave nothing behind.
- ``admin {"cancel": [ids], "requeue": [ids]}``: a superuser cancels, then requeues, with the
  jobs admin's actions, then opens the admin's lists, metrics pages and a job's page; returns
  the status codes.
- ``commands [[name, arg, ...], ...]``: management commands (``call_command``), each one's
  output captured.
"""

from __future__ import annotations

import io
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

ADMIN_PAGES = (
    "/admin/",
    "/admin/runledger/job/",
    "/admin/runledger/job/?status__exact=DEAD_LETTERED",
    "/admin/runledger/job/metrics/",
    "/admin/runledger/jobenqueueintent/",
    "/admin/runledger/jobenqueueintent/metrics/",
)


def _checkout(orders: int, threads: int) -> dict[str, Any]:
    from django.db import connections
    from django.test import Client

    def order(number: int) -> list[dict[str, Any]]:
        client = Client()
        body = {
            "reference": f"pgb-{number}",
            "email": f"buyer{number}@example.com",
            "total_cents": 1000 + number,
        }
        answers = []
        try:
            for _ in range(2):  # the second post is a client's retry of the same checkout
                response = client.post("/checkout/", body, content_type="application/json")
                answers.append({"status": response.status_code, "body": response.json()})
        finally:
            connections.close_all()
        return answers

    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = list(pool.map(order, range(orders)))
    failing = Client().post(
        "/checkout/",
        {
            "reference": "pgb-failed",
            "email": "x@example.com",
            "total_cents": 1,
            "fail_after_recording": True,
        },
        content_type="application/json",
    )
    return {"orders": results, "failed": {"status": failing.status_code, "body": failing.json()}}


def _admin(cancel: list[str], requeue: list[str]) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(
        username="pgbouncer-operator", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    actions = {}
    for name, job_ids in (("cancel_selected_jobs", cancel), ("requeue_selected_jobs", requeue)):
        if job_ids:
            response = client.post(
                "/admin/runledger/job/", {"action": name, "_selected_action": job_ids}
            )
            actions[name] = response.status_code
    pages = {url: client.get(url).status_code for url in ADMIN_PAGES}
    for job_id in [*cancel, *requeue][:1]:
        url = f"/admin/runledger/job/{job_id}/change/"
        pages[url] = client.get(url).status_code
    return {"actions": actions, "pages": pages}


def _commands(commands: list[list[str]]) -> list[str]:
    from django.core.management import call_command

    outputs = []
    for name, *args in commands:
        out = io.StringIO()
        call_command(name, *args, stdout=out)
        outputs.append(out.getvalue())
    return outputs


def _step(action: str, argument: Any) -> Any:
    if action == "checkout":
        return _checkout(argument["orders"], argument["threads"])
    if action == "admin":
        return _admin(argument.get("cancel", []), argument.get("requeue", []))
    if action == "commands":
        return _commands(argument)
    raise SystemExit(f"unknown action {action!r}")


def main(argv: list[str]) -> None:
    import django
    from django.test.utils import setup_test_environment

    django.setup()
    setup_test_environment()  # the test Client's host, as under a test runner
    results = [_step(action, argument) for action, argument in json.loads(argv[0])]
    sys.stdout.write(json.dumps(results) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
