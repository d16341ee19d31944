"""Reading under an explicit ReadScope: the check every scoped read starts with, and the
per-job-type metrics read that intents and jobs share."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Literal

from django.db import connections

from ..db.transaction import execute
from ..domain import ReadScope
from ..errors import Code, RunledgerError
from ..validation import validate_page, validate_search_text

ScopeKind = Literal["organization", "global", "admin"]


def checked_scope_kind(scope: object) -> ScopeKind:
    """The kind of a valid ``scope``. Fails closed: a hand-built scope with an unknown kind, or
    an organization scope without a tenant, is refused rather than read as admin or global."""
    if isinstance(scope, ReadScope):
        if scope.kind == "organization" and isinstance(scope.organization_id, uuid.UUID):
            return "organization"
        if scope.kind == "global" and scope.organization_id is None:
            return "global"
        if scope.kind == "admin" and scope.organization_id is None:
            return "admin"
    raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "scope must be a valid ReadScope")


def metrics_rows(
    statements: Mapping[ScopeKind, str],
    *,
    scope: ReadScope,
    job_type: str | None,
    limit: int,
    offset: int,
    using: str,
    context: str,
) -> list[tuple[Any, ...]]:
    """The rows of the metrics statement for ``scope``, checked input first (no SQL before)."""
    page = validate_page(limit, offset)
    exact_type = validate_search_text(job_type, "job_type")
    sql = statements[checked_scope_kind(scope)]
    params = {
        "organization_id": scope.organization_id,
        "job_type": exact_type,
        "limit": page.limit,
        "offset": page.offset,
    }
    with connections[using].cursor() as cursor:
        rows: list[tuple[Any, ...]] = execute(cursor, sql, params, context=context).fetchall()
    return rows
