"""What an atomic handler does to the world: one row per run of its body."""

from __future__ import annotations

from django.db import models


class Effect(models.Model):
    """One run of a handler's body. ``gate``, when set, makes the row's transaction wait at
    COMMIT for the advisory lock of that number (a deferred constraint trigger): a test
    holds the lock to stop a worker between its completion statement and its commit."""

    job_id = models.UUIDField(db_index=True)
    run_number = models.IntegerField()
    attempt = models.IntegerField()
    worker_id = models.TextField()
    gate = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "exact_effects"

    def __str__(self) -> str:
        return f"effect of {self.job_id} run {self.run_number} attempt {self.attempt}"
