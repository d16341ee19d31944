"""The intent table's columns without its constraints and secondary indexes.

What a team writes when it stores "work to do" as an ordinary model: the same row, the same
UUIDv7 primary key and JSON columns, created with ``Model.objects.create``.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from runledger_django.uuid7 import uuid7


class PlainIntent(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    job_type = models.TextField()
    organization_id = models.UUIDField(null=True, blank=True)
    payload = models.JSONField()
    priority = models.IntegerField(null=True, blank=True)
    max_attempts = models.IntegerField(null=True, blank=True)
    timeout_seconds = models.IntegerField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.TextField()
    stage = models.TextField(default="queued")
    enqueue_request_version = models.SmallIntegerField(default=1)
    enqueue_request = models.JSONField()
    execution_resource_key = models.TextField(null=True, blank=True)
    promotion_attempts = models.IntegerField(default=0)
    next_promotion_at = models.DateTimeField(db_default=Now())
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    status = models.TextField(default="PENDING")
    promoted_job_id = models.UUIDField(null=True, blank=True)
    promoted_at = models.DateTimeField(null=True, blank=True)
    conflicted_at = models.DateTimeField(null=True, blank=True)
    last_error_code = models.TextField(null=True, blank=True)
    last_error_message = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "bench_plain_intent"

    def __str__(self) -> str:
        return f"{self.job_type} {self.id}"
