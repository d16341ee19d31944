"""What every runledger admin page shares: the bounded-count paginator, the job type filter,
the read-only mixin and the base of the large tables' admins, the index entries that open
another page, and the link and JSON helpers.

The intent and job tables grow to millions of rows, so their changelists never count them in
full (a bounded count instead), filter on values that have indexes, offer no facets, and sort
only by the indexed creation order.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.options import ShowFacets
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import JobDefinition

if TYPE_CHECKING:
    LargeTableAdminBase = admin.ModelAdmin[Any]
    EntryAdminBase = admin.ModelAdmin[Any]
    PaginatorBase = Paginator[Any]
else:
    LargeTableAdminBase = EntryAdminBase = admin.ModelAdmin
    PaginatorBase = Paginator


class BoundedCountPaginator(PaginatorBase):
    """Counts at most ``count_bound`` rows, so a changelist never runs an unbounded COUNT(*).

    ``SELECT count(*) FROM (SELECT ... LIMIT bound + 1)`` stops early on big tables. When the
    bound is reached the count is reported as the bound and ``count_is_capped`` is set: the
    pages beyond it are not linked (offsets that deep are slow anyway; filter or search).
    """

    count_bound = 10_000
    """Keep it above ``list_per_page`` and ``list_max_show_all``: Django fetches what it thinks
    is a single page, or "show all", without a LIMIT."""
    count_is_capped = False

    @cached_property
    def count(self) -> int:
        object_list: QuerySet[Any] = self.object_list  # type: ignore[assignment]
        counted = object_list.order_by().values("pk")[: self.count_bound + 1].count()
        self.count_is_capped = counted > self.count_bound
        return min(counted, self.count_bound)


class JobTypeFilter(admin.SimpleListFilter):
    """Job types listed from the definitions table, never ``SELECT DISTINCT`` over a big one.

    A type without a definition can still be filtered on by typing ``?job_type=...``.
    """

    title = "job type"
    parameter_name = "job_type"

    def __init__(
        self, request: HttpRequest, params: dict[str, Any], model: Any, model_admin: Any
    ) -> None:
        self.model_admin = model_admin
        super().__init__(request, params, model, model_admin)

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        types = list(JobDefinition.objects.order_by("job_type").values_list("job_type", flat=True))
        current = self.value()
        if current and current not in types:
            types.append(current)
        return [(job_type, job_type) for job_type in types]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        condition = Q(job_type=value)
        if isinstance(self.model_admin, LargeTableAdmin):
            condition = self.model_admin.job_type_condition(value)
        return queryset.filter(condition)


class ReadOnlyMixin:
    """No adding, changing or deleting through the admin: rows change only via the services."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class LargeTableAdmin(ReadOnlyMixin, LargeTableAdminBase):
    """Read-only browsing of a table that may hold millions of rows."""

    paginator = BoundedCountPaginator
    show_full_result_count = False
    show_facets = ShowFacets.NEVER
    ordering = ("-created_at", "-id")
    """Served by the tables' (created_at DESC, id DESC) indexes."""
    sortable_by = ("id", "created_at")
    actions: Sequence[Any] | None = None
    list_per_page = 100
    # Only here to make Django render the search box; get_search_results does the matching.
    search_fields = ("=idempotency_key",)
    search_help_text = "An exact idempotency key, or an exact id (UUID)."
    json_columns: tuple[str, ...] = ()
    """JSON columns, never decoded by Django: a changelist row does not show them, and a detail
    page shows their text (``<column>_text``). jsonb keeps integers Python refuses to parse
    (past its int-to-str digit limit); decoding one would make the whole page fail."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request).defer(*self.json_columns)
        match = request.resolver_match
        if match is not None and match.url_name and match.url_name.endswith("_changelist"):
            return queryset
        texts = {f"{name}_text": Cast(name, output_field=TextField()) for name in self.json_columns}
        annotated: QuerySet[Any] = queryset.annotate(**texts)
        return annotated

    @staticmethod
    def by_organization_kind(**lookups: Any) -> Q:
        """``lookups`` split into the rows with and without an organization.

        Same rows, but each half implies the predicate of one of the partial unique indexes
        ``(job_type[, organization_id], idempotency_key)``, so PostgreSQL can answer from them
        instead of scanning the table.
        """
        return Q(organization_id__isnull=True, **lookups) | Q(
            organization_id__isnull=False, **lookups
        )

    def job_type_condition(self, job_type: str) -> Q:
        return Q(job_type=job_type)

    def ids_by_key(self, key: str) -> list[uuid.UUID]:
        """The ids of the rows recorded under ``key`` (each table's own search service)."""
        raise NotImplementedError

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """Exact matches only: ``icontains`` over millions of rows would scan them all.

        The key is looked up first, through the table's key-prefix index, whatever the job
        type and tenant; the changelist then reads the few rows found by primary key. (One
        query with the key as a subquery would let the planner walk the creation-order index
        to the end, testing every row against it.)"""
        term = search_term.strip()
        if not term:
            return queryset, False
        condition = Q(pk__in=self.ids_by_key(term))
        try:
            condition |= Q(pk=uuid.UUID(term))
        except ValueError:
            pass
        return queryset.filter(condition), False


def admin_link(admin_site: admin.AdminSite, name: str, object_id: Any, css_class: str) -> str:
    url = reverse(f"admin:{name}", args=(object_id,), current_app=admin_site.name)
    return format_html('<a class="{}" href="{}">{}</a>', css_class, url, object_id)


class AdminIndexEntry(ReadOnlyMixin, EntryAdminBase):
    """An entry on the admin index (a proxy model) whose "changelist" is another page.

    It has no permissions of its own: whoever may view ``viewed_model`` sees the entry.
    """

    viewed_model: ClassVar[type[Any]]

    def _may_view(self, request: HttpRequest) -> bool:
        opts = self.viewed_model._meta
        return request.user.has_perm(f"{opts.app_label}.view_{opts.model_name}")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._may_view(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may_view(request)

    def target_url(self) -> str:
        raise NotImplementedError

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self._may_view(request):
            raise PermissionDenied
        return HttpResponseRedirect(self.target_url())


def json_block(text: str | None, css_class: str) -> SafeString | str:
    """A column's JSON text, pretty, in a ``<pre>``; ``-`` for SQL NULL (a JSON ``null`` shows
    as ``null``). Text Python cannot parse (an integer past its int-to-str digit limit) is
    shown as PostgreSQL wrote it, with a note, rather than failing the page."""
    if text is None:
        return "-"
    try:
        pretty = json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False)
    except ValueError:
        return format_html(
            '<pre class="{}">{}</pre><p class="runledger-undecodable">'
            "Python cannot read this value (an integer longer than it parses); shown as "
            "stored.</p>",
            css_class,
            text,
        )
    return format_html('<pre class="{}">{}</pre>', css_class, pretty)


def selected_ids(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    limit: int,
    noun: str,
    action: str,
) -> list[Any] | None:
    """The selection's primary keys, or None (and an error message) when it is larger than
    one action takes: an action runs one transaction per row, so a whole table is refused."""
    ids = list(queryset.order_by().values_list("pk", flat=True)[: limit + 1])
    if len(ids) > limit:
        model_admin.message_user(
            request,
            f"Select at most {limit} {noun}s for one {action}; nothing was changed. "
            "Narrow the list with a filter first.",
            messages.ERROR,
        )
        return None
    return ids


def report_action(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    *,
    noun: str,
    past: str,
    done: int,
    unchanged: Counter[str] | None = None,
    refused: Counter[str] | None = None,
) -> None:
    """One message for the rows an action changed, and one per reason it left rows alone
    (INFO: nothing to do) or refused them (WARNING), counted, so a bulk action reads short."""
    if done:
        plural = noun if done == 1 else f"{noun}s"
        model_admin.message_user(request, f"{past.capitalize()} {done} {plural}.", messages.SUCCESS)
    for reasons, level in ((unchanged, messages.INFO), (refused, messages.WARNING)):
        for reason, count in sorted((reasons or Counter()).items()):
            subject = f"{noun} was" if count == 1 else f"{noun}s were"
            model_admin.message_user(request, f"{count} {subject} not {past}: {reason}.", level)
