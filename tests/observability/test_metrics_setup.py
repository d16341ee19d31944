"""Metrics as an operator sets them up: buckets and settings, the optional dependency, the
worker command's port, multiprocess mode and a web process whose database is down
(reference observability 10, items 7, 10 and 16).

Subprocesses stand in for a gunicorn worker in multiprocess mode and for ``manage.py
runledger_worker``; they read the test database, so the tests that feed them commit.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import Error
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import RequestFactory
from prometheus_client.exposition import generate_latest

from runledger_django import enqueue_job
from runledger_django.checks import check_settings
from runledger_django.conf import RUN_DURATION_BUCKETS, START_DELAY_BUCKETS
from runledger_django.prometheus import metrics_view
from runledger_django.prometheus.client import INSTALL_HINT, prometheus_client
from runledger_django.worker.metrics import PrometheusWorkerMetrics
from tests.conftest import MakeDefinition
from tests.observability.conftest import Scrape, scrape_port
from tests.worker.conftest import SpawnWorker, wait_until
from tests.worker.processes import BASE_DIR, database_url
from tests.worker_app import NOOP

A = "metrics.setup_a"

DOCUMENTED_RUN_DURATION = [
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900),
    *(1800, 3600),
]
DOCUMENTED_START_DELAY = [
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600),
]


def bounds(metrics: PrometheusWorkerMetrics, name: str) -> list[float]:
    metrics.serving([A], concurrency=1)
    scrape = Scrape(generate_latest(metrics.registry).decode())
    found = {
        float(dict(labels)["le"])
        for labels in scrape.series(f"{name}_bucket")
        if dict(labels)["job_type"] == A
    }
    return sorted(found)


def test_buckets__defaults__the_documented_job_shaped_bounds() -> None:
    """Item 16: the run-duration buckets reach an hour (the default timeout is 900 s)."""
    metrics = PrometheusWorkerMetrics()

    assert list(RUN_DURATION_BUCKETS) == DOCUMENTED_RUN_DURATION
    assert list(START_DELAY_BUCKETS) == DOCUMENTED_START_DELAY
    inf = float("inf")
    assert bounds(metrics, "runledger_job_run_duration_seconds") == [
        *DOCUMENTED_RUN_DURATION,
        inf,
    ]
    assert bounds(metrics, "runledger_job_start_delay_seconds") == [*DOCUMENTED_START_DELAY, inf]


def test_buckets__settings_override__followed(settings: Any) -> None:
    settings.RUNLEDGER = {
        "METRICS_RUN_DURATION_BUCKETS": [1, 60, 7200],
        "METRICS_START_DELAY_BUCKETS": (0.5,),
    }
    metrics = PrometheusWorkerMetrics()

    inf = float("inf")
    assert bounds(metrics, "runledger_job_run_duration_seconds") == [1, 60, 7200, inf]
    assert bounds(metrics, "runledger_job_start_delay_seconds") == [0.5, inf]
    assert check_settings() == []


@pytest.mark.parametrize(
    ("key", "value", "check_id"),
    [
        ("METRICS_JOB_TYPE_LIMIT", 0, "runledger.E060"),
        ("METRICS_JOB_TYPE_LIMIT", "100", "runledger.E060"),
        ("METRICS_TIMEOUT_MS", 60_001, "runledger.E061"),
        ("METRICS_TIMEOUT_MS", 1.5, "runledger.E061"),
        ("METRICS_CACHE_SECONDS", -1, "runledger.E062"),
        ("METRICS_CACHE_SECONDS", float("inf"), "runledger.E062"),
        ("METRICS_RUN_DURATION_BUCKETS", [], "runledger.E063"),
        ("METRICS_RUN_DURATION_BUCKETS", [1, 1], "runledger.E063"),
        ("METRICS_RUN_DURATION_BUCKETS", [0, 1], "runledger.E063"),
        ("METRICS_RUN_DURATION_BUCKETS", "1,2", "runledger.E063"),
        ("METRICS_START_DELAY_BUCKETS", [1, float("inf")], "runledger.E064"),
        ("METRICS_START_DELAY_BUCKETS", [True], "runledger.E064"),
        ("METRICS_ERROR_CLASS_LABEL", 1, "runledger.E065"),
    ],
)
def test_checks__invalid_metrics_setting__reported(
    settings: Any, key: str, value: object, check_id: str
) -> None:
    settings.RUNLEDGER = {key: value}

    errors = check_settings()

    assert [(type(error), error.id) for error in errors] == [(Error, check_id)]


def test_checks__valid_metrics_settings__accepted(settings: Any) -> None:
    settings.RUNLEDGER = {
        "METRICS_JOB_TYPE_LIMIT": 10_000,
        "METRICS_TIMEOUT_MS": 1,
        "METRICS_CACHE_SECONDS": 0,
        "METRICS_RUN_DURATION_BUCKETS": [0.5, 2],
        "METRICS_START_DELAY_BUCKETS": [1],
        "METRICS_ERROR_CLASS_LABEL": True,
    }

    assert check_settings() == []


def test_without_prometheus_client__asking_for_metrics__says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)

    with pytest.raises(ImproperlyConfigured, match=r"runledger-django\[prometheus\]"):
        prometheus_client()
    with pytest.raises(ImproperlyConfigured, match=r"runledger-django\[prometheus\]"):
        metrics_view(RequestFactory().get("/metrics/"))
    with pytest.raises(ImproperlyConfigured):
        PrometheusWorkerMetrics()
    with pytest.raises(CommandError, match=r"--metrics-port: .*runledger-django\[prometheus\]"):
        call_command("runledger_worker", "--metrics-port", "0", "--burst")


def run_python(code: str, **env: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter with Django set up on the test settings; return
    the JSON object it prints last."""
    result = subprocess.run(  # noqa: S603  (fixed interpreter, code from this module)
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        cwd=BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.worker_settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_without_prometheus_client__the_app_imports_and_runs() -> None:
    """The extra is optional: nothing imports prometheus_client until metrics are asked for."""
    out = run_python(
        "import json, sys\n"
        "from runledger_django.prometheus import metrics_view\n"
        "from runledger_django.worker import metrics, runtime\n"
        "from runledger_django.management.commands import runledger_worker\n"
        "print(json.dumps({'loaded': 'prometheus_client' in sys.modules}))\n",
        DATABASE_URL=database_url(),
    )

    assert out == {"loaded": False}
    assert "runledger-django[prometheus]" in INSTALL_HINT


VIEW_SCRIPT = """
import json
import uuid
from django.test import RequestFactory
from prometheus_client import CollectorRegistry, Counter, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector
from runledger_django.prometheus import metrics_view, register_queue_collector

hits = Counter("host_requests_total", "A host's own multiprocess counter.")
hits.inc()
response = metrics_view(RequestFactory().get("/metrics/"))
host = CollectorRegistry()
MultiProcessCollector(host)
register_queue_collector(host)
print(json.dumps({
    "status": response.status_code,
    "view": response.content.decode(),
    "host": generate_latest(host).decode(),
    "multiprocess": values.ValueClass is not values.MutexValue,
}))
"""


@pytest.mark.django_db(transaction=True)
def test_multiprocess_mode__the_view_still_exports_the_gauges(
    make_definition: MakeDefinition, tmp_path: Path
) -> None:
    """Item 10: under PROMETHEUS_MULTIPROC_DIR (gunicorn) the default registry is not
    exported; the view's own registry is, and a host's multiprocess registry can take the
    collector beside its own counters."""
    make_definition(A)
    enqueue_job(A, {})
    enqueue_job(A, {})

    out = run_python(
        VIEW_SCRIPT, DATABASE_URL=database_url(), PROMETHEUS_MULTIPROC_DIR=str(tmp_path)
    )

    assert out["multiprocess"] is True
    assert out["status"] == 200
    for text in (out["view"], out["host"]):
        scrape = Scrape(text)
        assert scrape.value("runledger_collector_up") == 1
        assert scrape.value("runledger_jobs", job_type=A, state="due") == 2
    assert Scrape(out["host"]).value("host_requests_total") == 1


def test_web_process__database_unreachable__200_with_collector_down() -> None:
    """Item 7: a web process whose database refuses connections still answers the scrape."""
    out = run_python(
        VIEW_SCRIPT.replace("MultiProcessCollector(host)\n", ""),
        DATABASE_URL="postgres://postgres@127.0.0.1:1/runledger_unreachable",
        RUNLEDGER_TEST_DB="runledger_unreachable",
    )

    assert out["status"] == 200
    scrape = Scrape(out["view"])
    assert scrape.value("runledger_collector_up") == 0
    assert "runledger_jobs" not in scrape.types


@pytest.mark.django_db(transaction=True)
def test_runledger_worker__metrics_port__serves_worker_queue_and_process_metrics(
    make_definition: MakeDefinition, spawn_worker: SpawnWorker
) -> None:
    """``runledger_worker --metrics-port`` serves its counters, with
    ``--collect-queue-metrics`` the queue gauges, and the default registry's process metrics."""
    make_definition(NOOP, max_attempts=3, default_timeout_seconds=60)
    for _ in range(3):
        enqueue_job(NOOP, {})
    worker = spawn_worker(
        "--job-type",
        NOOP,
        "--metrics-port",
        "0",
        "--metrics-addr",
        "127.0.0.1",
        "--collect-queue-metrics",
    )
    banner = worker.wait_for_line("metrics on port ")
    port = int(re.search(r"metrics on port (\d+)", banner).group(1))  # type: ignore[union-attr]

    due = {"job_type": NOOP, "state": "due"}

    def drained() -> Scrape | None:
        try:
            scrape = scrape_port(port)
        except OSError:
            return None  # not listening yet
        done = scrape.get("runledger_job_attempts_total", job_type=NOOP, outcome="succeeded")
        # The queue gauges are cached METRICS_CACHE_SECONDS (5 s by default) per exporter.
        return scrape if done == 3 and scrape.get("runledger_jobs", **due) == 0 else None

    scrape = wait_until(drained, what="three successes on the metrics port")
    assert scrape.value("runledger_collector_up") == 1
    assert "process_cpu_seconds" in scrape.types
    worker.stop()


def test_runledger_worker__queue_metrics_without_a_port__refused() -> None:
    with pytest.raises(CommandError, match="needs --metrics-port"):
        call_command("runledger_worker", "--collect-queue-metrics", "--burst")


FROM_OTHER_PARTS: set[str] = set()
"""Gauges the docs' alerts name that the worker registry and pausing add (issue 21)."""


@pytest.mark.django_db
def test_docs_and_dashboard__name_only_metrics_the_exporters_serve(
    make_definition: MakeDefinition,
) -> None:
    """A renamed metric must not leave a dead alert or an empty panel behind."""
    import re

    from tests.observability.conftest import scrape_view

    make_definition(A)
    worker = PrometheusWorkerMetrics()
    worker.serving([A], concurrency=1)
    served = Scrape(generate_latest(worker.registry).decode()).names | scrape_view().names
    docs = BASE_DIR / "docs"
    texts = {
        "metrics.md": (docs / "metrics.md").read_text(),
        "grafana/runledger.json": json.dumps(
            [
                target["expr"]
                for panel in json.loads((docs / "grafana" / "runledger.json").read_text())["panels"]
                for target in panel["targets"]
            ]
        ),
    }
    for where, text in texts.items():
        named = set(re.findall(r"\brunledger_[a-z_]*[a-z]", text))
        not_metrics = {"runledger_worker", "runledger_django"}  # the command, the package
        unknown = named - served - FROM_OTHER_PARTS - not_metrics
        assert not unknown, (where, sorted(unknown))
    assert "runledger_jobs" in texts["grafana/runledger.json"]


def finished_run(job_type: str, outcome: str = "succeeded", code: str | None = None) -> Any:
    from runledger_django.worker.execution import JobRun

    return JobRun(
        job_id=uuid.uuid4(),
        job_type=job_type,
        run_number=1,
        attempt=1,
        worker_id="w",
        outcome=outcome,  # type: ignore[arg-type]
        error_code=code,
        duration_seconds=0.1,
    )


def test_worker_labels__types_past_the_limit_and_many_custom_codes__fold_into_other(
    settings: Any,
) -> None:
    """The worker's labels are bounded as the collector's are: job types past
    METRICS_JOB_TYPE_LIMIT, and handler error codes past the 50th, read ``other``."""
    settings.RUNLEDGER = {"METRICS_JOB_TYPE_LIMIT": 2}
    metrics = PrometheusWorkerMetrics()
    metrics.serving(["t.c", "t.a", "t.b"], concurrency=1)
    metrics.finished(finished_run("t.c"))
    metrics.finished(finished_run("t.new"))
    for n in range(60):
        metrics.finished(finished_run("t.a", "dead_lettered", f"billing.code_{n:02d}"))
    metrics.finished(finished_run("t.a", "retried", "job.handler_failed"))

    scrape = Scrape(generate_latest(metrics.registry).decode())
    types = {dict(labels)["job_type"] for labels in scrape.series("runledger_job_attempts_total")}
    assert types == {"t.a", "t.b", "other"}
    assert scrape.value("runledger_job_attempts_total", job_type="other", outcome="succeeded") == 2
    codes = {
        dict(labels)["error_code"]: value
        for labels, value in scrape.series("runledger_job_failures_total").items()
    }
    assert len(codes) == 52  # 50 custom codes, "other", and the product's code
    assert codes["other"] == 10
    assert codes["job.handler_failed"] == 1
