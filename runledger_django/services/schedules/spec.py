"""Schedule input rules: every field a declaration, the API or the admin form gives is checked
here, before any SQL, and each bad value raises its own ``job_schedule.*`` code.

One function, ``build_spec``, serves ``schedule(...)`` in ``jobs.py``, ``save_schedule`` and the
admin's form, so the three can never disagree on what a valid schedule is.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
import zoneinfo
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from ...domain import CatchUp, JobTarget, Overlap, ScheduleSpec, TargetSpec, coerce_uuid
from ...errors import Code, RunledgerError
from ...validation import (
    INT32_MAX,
    INT32_MIN,
    WHITESPACE,
    encode_payload,
    is_blank,
    storable_text,
    utf8_length,
    validate_job_type,
)
from .timing import MAX_JITTER_SECONDS, CronError, parse_cron

NAME_MAX_BYTES = 255
CRON_MAX_CHARS = 255
TIMEZONE_MAX_CHARS = 64
DEFAULT_GRACE_SECONDS = 60
"""Catch-up ``skip``: a fire at most this late still runs."""
DEFAULT_CATCH_UP_LIMIT = 100
"""Catch-up ``all`` (and ``skip``'s records): fires handled one by one after an outage."""
CATCH_UP_LIMIT_MAX = 10_000
_ZONE_SHAPE = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")
"""The shape of an IANA name; the table's CHECK holds the same (no path tricks reach
zoneinfo)."""


def _fail(code: Code, detail: str) -> RunledgerError:
    return RunledgerError.for_code(code, detail)


def validate_schedule_name(value: object) -> str:
    """Non-blank storable text, no surrounding whitespace, at most 255 bytes."""
    if not isinstance(value, str) or not storable_text(value):
        raise _fail(Code.SCHEDULE_INVALID_NAME, "name must be storable text")
    name = str(value)
    if is_blank(name) or name[0] in WHITESPACE or name[-1] in WHITESPACE:
        raise _fail(Code.SCHEDULE_INVALID_NAME, "name is blank or padded")
    if utf8_length(name) > NAME_MAX_BYTES:
        raise _fail(Code.SCHEDULE_INVALID_NAME, f"name longer than {NAME_MAX_BYTES} bytes")
    return name


def validate_cron(value: object) -> str:
    if not isinstance(value, str) or not storable_text(value) or len(value) > CRON_MAX_CHARS:
        raise _fail(Code.SCHEDULE_INVALID_CRON, "cron must be short storable text")
    try:
        parse_cron(str(value))
    except CronError as error:
        raise _fail(Code.SCHEDULE_INVALID_CRON, f"cron refused: {error}") from None
    return str(value)


def _whole_seconds(value: object, code: Code, field: str) -> int:
    if isinstance(value, dt.timedelta):
        if value.microseconds:
            raise _fail(code, f"{field} is not a whole number of seconds")
        return value.days * 86_400 + value.seconds
    if type(value) is int:
        return value
    raise _fail(code, f"{field} must be a timedelta or int seconds, got {type(value).__name__}")


def validate_interval(value: object) -> int:
    seconds = _whole_seconds(value, Code.SCHEDULE_INVALID_INTERVAL, "every")
    if not 1 <= seconds <= INT32_MAX:
        raise _fail(Code.SCHEDULE_INVALID_INTERVAL, "every out of range")
    return seconds


def validate_jitter(value: object) -> int:
    if value is None:
        return 0
    seconds = _whole_seconds(value, Code.SCHEDULE_INVALID_JITTER, "jitter")
    if not 0 <= seconds <= MAX_JITTER_SECONDS:
        raise _fail(Code.SCHEDULE_INVALID_JITTER, "jitter out of range")
    return seconds


@lru_cache(maxsize=1024)
def _zone_exists(name: str) -> bool:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError, TypeError):
        return False
    return True


def validate_timezone(value: object) -> str:
    """An IANA zone name (a ``ZoneInfo`` gives its key); default ``UTC``."""
    if isinstance(value, zoneinfo.ZoneInfo):
        value = value.key
    if (
        not isinstance(value, str)
        or len(value) > TIMEZONE_MAX_CHARS
        or not _ZONE_SHAPE.fullmatch(value)
        or not _zone_exists(str(value))
    ):
        raise _fail(Code.SCHEDULE_INVALID_TIMEZONE, "not an IANA time zone name")
    return str(value)


def _choice(value: object, choices: type[CatchUp] | type[Overlap], code: Code) -> str:
    if isinstance(value, str) and str(value) in choices.values:
        return str(value)
    raise _fail(code, f"expected one of {', '.join(choices.values)}")


def _priority(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not INT32_MIN <= value <= INT32_MAX:
        raise _fail(Code.SCHEDULE_INVALID_PRIORITY, "priority must be a 32-bit int")
    return value


def _bool(value: object, field: str) -> bool:
    if type(value) is not bool:
        raise _fail(Code.SCHEDULE_INVALID_ARGUMENT, f"{field} must be True or False")
    return value


def _organization(value: object) -> uuid.UUID | None:
    if value is None:
        return None
    return coerce_uuid(value, Code.SCHEDULE_INVALID_ORGANIZATION_ID)


def _encode(payload: object) -> str:
    try:
        return encode_payload(payload)
    except RunledgerError as error:
        raise _fail(Code.SCHEDULE_INVALID_PAYLOAD, error.internal_message) from None


def resolve_target(
    target: object, *, args: object, kwargs: object, payload: object
) -> tuple[str, str, int | None]:
    """``(job type, payload JSON, target priority)`` of a job type or a ``JobTarget``.

    A job type takes ``payload`` (default ``{}``) and no arguments; a Task takes ``args`` and
    ``kwargs`` and no payload (its arguments are its payload).
    """
    if isinstance(target, str):
        if args is not None or kwargs is not None:
            raise _fail(Code.SCHEDULE_INVALID_ARGUMENT, "args and kwargs are for Task targets")
        try:
            job_type = validate_job_type(target)
        except RunledgerError as error:
            raise _fail(Code.SCHEDULE_INVALID_TARGET, error.internal_message) from None
        return job_type, _encode({} if payload is None else payload), None
    maker = getattr(target, "job_target", None)
    if not callable(maker):
        raise _fail(
            Code.SCHEDULE_INVALID_TARGET,
            f"target is a {type(target).__name__}, not a job type or a runledger Task",
        )
    if payload is not None:
        raise _fail(Code.SCHEDULE_INVALID_ARGUMENT, "a Task target takes args/kwargs, not payload")
    if args is not None and (isinstance(args, str | bytes) or not isinstance(args, Sequence)):
        raise _fail(Code.SCHEDULE_INVALID_PAYLOAD, "args must be a list")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise _fail(Code.SCHEDULE_INVALID_PAYLOAD, "kwargs must be a dict")
    checked: JobTarget = target  # type: ignore[assignment]
    try:
        spec = checked.job_target(list(args or ()), dict(kwargs or {}))
    except RunledgerError as error:
        raise _fail(Code.SCHEDULE_INVALID_PAYLOAD, error.internal_message) from None
    except (TypeError, ValueError) as exc:
        # Django's normalize_json refuses an argument JSON cannot keep.
        raise _fail(Code.SCHEDULE_INVALID_PAYLOAD, type(exc).__name__) from None
    except Exception as exc:  # InvalidTask and the like: the task is not usable here
        raise _fail(Code.SCHEDULE_INVALID_TARGET, type(exc).__name__) from None
    if not isinstance(spec, TargetSpec):
        raise _fail(Code.SCHEDULE_INVALID_TARGET, "job_target() did not return a TargetSpec")
    try:
        job_type = validate_job_type(spec.job_type)
    except RunledgerError as error:
        raise _fail(Code.SCHEDULE_INVALID_TARGET, error.internal_message) from None
    return job_type, _encode(spec.payload), _priority(spec.priority)


def build_spec(
    name: object,
    target: object,
    *,
    cron: object = None,
    every: object = None,
    timezone: object = "UTC",
    payload: object = None,
    args: object = None,
    kwargs: object = None,
    organization_id: object = None,
    priority: object = None,
    jitter: object = None,
    catch_up: object = CatchUp.LATEST,
    catch_up_grace: object = DEFAULT_GRACE_SECONDS,
    catch_up_limit: object = DEFAULT_CATCH_UP_LIMIT,
    overlap: object = Overlap.ALLOW,
    enabled: object = True,
    run_on_create: object = False,
) -> ScheduleSpec:
    """Validate a schedule in a fixed order and return its ``ScheduleSpec``.

    Raises:
        RunledgerError: ``job_schedule.invalid_name``, ``invalid_target``, ``invalid_cron``,
            ``invalid_interval``, ``invalid_timezone``, ``invalid_payload``,
            ``invalid_organization_id``, ``invalid_priority``, ``invalid_jitter``,
            ``invalid_catch_up``, ``invalid_overlap``, ``invalid_argument``.
    """
    checked_name = validate_schedule_name(name)
    if (cron is None) == (every is None):
        raise _fail(
            Code.SCHEDULE_INVALID_CRON if cron is None else Code.SCHEDULE_INVALID_INTERVAL,
            "give exactly one of cron and every",
        )
    checked_cron = validate_cron(cron) if cron is not None else None
    interval = validate_interval(every) if every is not None else None
    zone_name = validate_timezone(timezone)
    job_type, payload_json, target_priority = resolve_target(
        target, args=args, kwargs=kwargs, payload=payload
    )
    org = _organization(organization_id)
    checked_priority = _priority(priority)
    jitter_seconds = validate_jitter(jitter)
    checked_catch_up = _choice(catch_up, CatchUp, Code.SCHEDULE_INVALID_CATCH_UP)
    grace = _whole_seconds(catch_up_grace, Code.SCHEDULE_INVALID_CATCH_UP, "catch_up_grace")
    if not 1 <= grace <= INT32_MAX:
        raise _fail(Code.SCHEDULE_INVALID_CATCH_UP, "catch_up_grace out of range")
    if type(catch_up_limit) is not int or not 1 <= catch_up_limit <= CATCH_UP_LIMIT_MAX:
        raise _fail(Code.SCHEDULE_INVALID_CATCH_UP, "catch_up_limit out of range")
    checked_overlap = _choice(overlap, Overlap, Code.SCHEDULE_INVALID_OVERLAP)
    return ScheduleSpec(
        name=checked_name,
        job_type=job_type,
        payload_json=payload_json,
        cron=checked_cron,
        interval_seconds=interval,
        timezone=zone_name,
        organization_id=org,
        priority=checked_priority if checked_priority is not None else target_priority,
        jitter_seconds=jitter_seconds,
        catch_up=checked_catch_up,
        catch_up_grace_seconds=grace,
        catch_up_limit=catch_up_limit,
        overlap=checked_overlap,
        enabled=_bool(enabled, "enabled"),
        run_on_create=_bool(run_on_create, "run_on_create"),
    )


def spec_fields(spec: ScheduleSpec) -> dict[str, Any]:
    """The declared columns of a spec, as a write stores them (sync compares these)."""
    return {
        "job_type": spec.job_type,
        "payload_json": spec.payload_json,
        "cron": spec.cron,
        "interval_seconds": spec.interval_seconds,
        "timezone": spec.timezone,
        "organization_id": spec.organization_id,
        "priority": spec.priority,
        "jitter_seconds": spec.jitter_seconds,
        "catch_up": spec.catch_up,
        "catch_up_grace_seconds": spec.catch_up_grace_seconds,
        "catch_up_limit": spec.catch_up_limit,
        "overlap": spec.overlap,
        "enabled": spec.enabled,
    }
