"""System checks: settings (always) and the database server (with ``check --database``)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from typing import Any

from django.core import checks
from django.core.checks import CheckMessage, Error, Tags, register
from django.db import connections

from .conf import DEFAULTS
from .domain import MIN_SERVER_VERSION
from .errors import RunledgerError
from .validation import validate_job_type


def _is_int_in(value: object, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _is_job_type(value: object) -> bool:
    """What promote_intents would accept: a non-blank, storable job type within the limit."""
    try:
        validate_job_type(value)
    except RunledgerError:
        return False
    return True


@register(Tags.compatibility)
def check_settings(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    from django.conf import settings

    errors: list[CheckMessage] = []
    raw = getattr(settings, "RUNLEDGER", {})
    if not isinstance(raw, dict):
        return [
            Error(
                "RUNLEDGER must be a dict.",
                hint="Set RUNLEDGER = {...} or remove it to use the defaults.",
                id="runledger.E001",
            )
        ]
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        errors.append(
            Error(
                f"RUNLEDGER has unknown keys: {', '.join(unknown)}.",
                hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
                id="runledger.E002",
            )
        )
    types = raw.get("PROMOTE_JOB_TYPES")
    if types is not None and (
        isinstance(types, str)
        or not isinstance(types, list | tuple)
        or not all(_is_job_type(t) for t in types)
    ):
        errors.append(
            Error(
                "RUNLEDGER['PROMOTE_JOB_TYPES'] must be None or a list of non-blank job types.",
                hint="None promotes every enabled job definition.",
                id="runledger.E003",
            )
        )
    if "PROMOTION_BATCH_SIZE" in raw and not _is_int_in(raw["PROMOTION_BATCH_SIZE"], 1, 1000):
        errors.append(
            Error(
                "RUNLEDGER['PROMOTION_BATCH_SIZE'] must be an int from 1 to 1000.",
                hint="The default is 24, the per-row path's savepoint bound.",
                id="runledger.E004",
            )
        )
    if not _is_seconds(raw.get("PROMOTER_INTERVAL", DEFAULTS["PROMOTER_INTERVAL"])):
        errors.append(_seconds_error("PROMOTER_INTERVAL", "runledger.E005"))
    if "PRUNE_BATCH_SIZE" in raw and not _is_int_in(raw["PRUNE_BATCH_SIZE"], 1, 1000):
        errors.append(
            Error(
                "RUNLEDGER['PRUNE_BATCH_SIZE'] must be an int from 1 to 1000.",
                hint="The default is 1000.",
                id="runledger.E006",
            )
        )
    errors += _worker_setting_errors(raw)
    errors += _schedule_setting_errors(raw)
    errors += _metrics_setting_errors(raw)
    errors += _probe_setting_errors(raw)
    errors += _tracing_setting_errors(raw)
    return errors


def _is_seconds(value: object, *, zero_ok: bool = False) -> bool:
    """A number of seconds a loop may wait: Event.wait() overflows on inf or beyond
    TIMEOUT_MAX, and would crash the loop."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    low_ok = value >= 0 if zero_ok else value > 0
    return low_ok and value <= threading.TIMEOUT_MAX


def _seconds_error(key: str, check_id: str, *, zero_ok: bool = False) -> Error:
    kind = "a non-negative" if zero_ok else "a positive"
    return Error(
        f"RUNLEDGER['{key}'] must be {kind}, finite number of seconds.",
        hint=f"The default is {DEFAULTS[key]}.",
        id=check_id,
    )


def _worker_setting_errors(raw: dict[str, Any]) -> list[CheckMessage]:
    """The worker runtime's settings (SPEC "Running jobs"); ids E020 and up."""
    errors: list[CheckMessage] = []
    if "LEASE_SECONDS" in raw and not _is_int_in(raw["LEASE_SECONDS"], 1, 86_400):
        errors.append(
            Error(
                "RUNLEDGER['LEASE_SECONDS'] must be an int from 1 to 86400.",
                hint="The default is 60; heartbeats renew the lease every third of it.",
                id="runledger.E020",
            )
        )
    for key, check_id, zero_ok in (
        ("REAPER_INTERVAL_SECONDS", "runledger.E021", False),
        ("WORKER_GRACE_SECONDS", "runledger.E022", True),
        ("WORKER_POLL_INTERVAL", "runledger.E023", False),
        ("OUTAGE_LIMIT_SECONDS", "runledger.E024", False),
        ("WORKER_IDLE_POLL_SECONDS", "runledger.E027", False),
    ):
        if key in raw and not _is_seconds(raw[key], zero_ok=zero_ok):
            errors.append(_seconds_error(key, check_id, zero_ok=zero_ok))
    for key, check_id in (("WAKEUP_NOTIFY", "runledger.E025"), ("WORKER_LISTEN", "runledger.E026")):
        if key in raw and not isinstance(raw[key], bool):
            errors.append(
                Error(
                    f"RUNLEDGER['{key}'] must be True or False.",
                    hint=f"The default is {DEFAULTS[key]}.",
                    id=check_id,
                )
            )
    return errors


TRACING_RUN_PARENTS = ("link", "child", "none")


def _tracing_setting_errors(raw: dict[str, Any]) -> list[CheckMessage]:
    """The tracing settings (docs/tracing.md); ids E070 and up."""
    errors: list[CheckMessage] = []
    for key, check_id in (
        ("TRACING_ENABLED", "runledger.E070"),
        ("TRACING_BAGGAGE", "runledger.E072"),
    ):
        if key in raw and not isinstance(raw[key], bool):
            errors.append(
                Error(
                    f"RUNLEDGER['{key}'] must be True or False.",
                    hint=f"The default is {DEFAULTS[key]}.",
                    id=check_id,
                )
            )
    if "TRACING_RUN_PARENT" in raw and raw["TRACING_RUN_PARENT"] not in TRACING_RUN_PARENTS:
        errors.append(
            Error(
                "RUNLEDGER['TRACING_RUN_PARENT'] must be 'link', 'child' or 'none'.",
                hint="The default is 'link': a run's span links to the span that enqueued it.",
                id="runledger.E071",
            )
        )
    return errors


def _schedule_setting_errors(raw: dict[str, Any]) -> list[CheckMessage]:
    """The scheduler's settings (SPEC "Periodic schedules"); ids E050 and up."""
    errors: list[CheckMessage] = []
    poll = raw.get("SCHEDULE_POLL_SECONDS", DEFAULTS["SCHEDULE_POLL_SECONDS"])
    if not _is_seconds(poll) or poll < 1:
        errors.append(
            Error(
                "RUNLEDGER['SCHEDULE_POLL_SECONDS'] must be a finite number of seconds, at "
                "least 1.",
                hint="The default is 30; schedulers wake sooner when a cursor comes due.",
                id="runledger.E050",
            )
        )
    if "SCHEDULE_BATCH_SIZE" in raw and not _is_int_in(raw["SCHEDULE_BATCH_SIZE"], 1, 1000):
        errors.append(
            Error(
                "RUNLEDGER['SCHEDULE_BATCH_SIZE'] must be an int from 1 to 1000.",
                hint="The default is 500.",
                id="runledger.E051",
            )
        )
    return errors


def _is_buckets(value: object) -> bool:
    """Histogram bounds: a non-empty list of finite, positive, strictly increasing numbers."""
    if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
        return False
    if not all(not isinstance(bound, bool) and isinstance(bound, int | float) for bound in value):
        return False
    bounds = [float(bound) for bound in value]
    return all(0 < bound < float("inf") for bound in bounds) and all(
        low < high for low, high in itertools.pairwise(bounds)
    )


def _metrics_setting_errors(raw: dict[str, Any]) -> list[CheckMessage]:
    """The Prometheus metrics' settings (docs/metrics.md); ids E060 and up."""
    errors: list[CheckMessage] = []
    for key, check_id, high in (
        ("METRICS_JOB_TYPE_LIMIT", "runledger.E060", 10_000),
        ("METRICS_TIMEOUT_MS", "runledger.E061", 60_000),
    ):
        if key in raw and not _is_int_in(raw[key], 1, high):
            errors.append(
                Error(
                    f"RUNLEDGER['{key}'] must be an int from 1 to {high}.",
                    hint=f"The default is {DEFAULTS[key]}.",
                    id=check_id,
                )
            )
    if "METRICS_CACHE_SECONDS" in raw and not _is_seconds(
        raw["METRICS_CACHE_SECONDS"], zero_ok=True
    ):
        errors.append(_seconds_error("METRICS_CACHE_SECONDS", "runledger.E062", zero_ok=True))
    for key, check_id in (
        ("METRICS_RUN_DURATION_BUCKETS", "runledger.E063"),
        ("METRICS_START_DELAY_BUCKETS", "runledger.E064"),
    ):
        if key in raw and not _is_buckets(raw[key]):
            errors.append(
                Error(
                    f"RUNLEDGER['{key}'] must be a non-empty list of finite, positive, "
                    "strictly increasing numbers of seconds.",
                    hint="Leave it out for the job-shaped defaults (docs/metrics.md).",
                    id=check_id,
                )
            )
    if "METRICS_ERROR_CLASS_LABEL" in raw and not isinstance(
        raw["METRICS_ERROR_CLASS_LABEL"], bool
    ):
        errors.append(
            Error(
                "RUNLEDGER['METRICS_ERROR_CLASS_LABEL'] must be True or False.",
                hint="The default is False.",
                id="runledger.E065",
            )
        )
    return errors


def _probe_setting_errors(raw: dict[str, Any]) -> list[CheckMessage]:
    """The probes' and the worker registry's settings (SPEC "Observability"); ids E080 up."""
    errors: list[CheckMessage] = []
    for key, check_id, optional in (
        ("LIVENESS_MAX_AGE_SECONDS", "runledger.E080", True),
        ("READINESS_DB_MAX_AGE_SECONDS", "runledger.E081", True),
        ("WORKER_HEARTBEAT_SECONDS", "runledger.E082", False),
        ("WORKER_RETENTION_SECONDS", "runledger.E083", False),
    ):
        if key not in raw or (optional and raw[key] is None):
            continue
        if not _is_seconds(raw[key]):
            error = _seconds_error(key, check_id)
            if optional:
                error.msg = f"RUNLEDGER['{key}'] must be None or a positive, finite number."
            errors.append(error)
    return errors


@register(Tags.database)
def check_database(
    app_configs: Sequence[Any] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """Runs only under ``check --database``: engine, server version, isolation level."""
    messages: list[CheckMessage] = []
    for alias in databases or []:
        connection = connections[alias]
        version = None
        if connection.vendor == "postgresql":
            connection.ensure_connection()
            version = connection.pg_version  # type: ignore[attr-defined]
        isolation = connection.settings_dict.get("OPTIONS", {}).get("isolation_level")
        messages += database_messages(alias, connection.vendor, version, isolation)
    return messages


def database_messages(
    alias: str, vendor: str, server_version: int | None, isolation_level: object
) -> list[CheckMessage]:
    """The database check's verdict on one connection's facts (pure, so tests can feed it)."""
    if vendor != "postgresql":
        return [
            Error(
                f"Database {alias!r} uses {vendor}; runledger_django needs PostgreSQL.",
                hint="Point DATABASES at PostgreSQL 15 or newer.",
                id="runledger.E010",
            )
        ]
    messages: list[CheckMessage] = []
    if server_version is not None and server_version < MIN_SERVER_VERSION:
        messages.append(
            Error(
                f"Database {alias!r} runs PostgreSQL {server_version // 10000}; "
                "runledger_django needs 15 or newer.",
                hint="Upgrade the server; promotion and retention rely on 15+ behaviour.",
                id="runledger.E011",
            )
        )
    if isolation_level is not None:
        from psycopg import IsolationLevel

        if isolation_level not in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
            messages.append(
                checks.Warning(
                    f"Database {alias!r} defaults to isolation level {isolation_level!r}.",
                    hint="record_intent inside your own atomic blocks requires READ COMMITTED; "
                    "runledger's own transactions set it explicitly.",
                    id="runledger.W010",
                )
            )
    return messages
