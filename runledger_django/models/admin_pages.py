"""Proxy models that only give the admin index an entry: the metrics pages and the dead letters.
No tables and no permissions of their own (viewing one takes the view permission of the model
it shows).
"""

from __future__ import annotations

from .intents import JobEnqueueIntent
from .jobs import Job


class IntentMetricsPage(JobEnqueueIntent):
    """The intent metrics page's entry on the admin index. A proxy: no table, no permissions of
    its own (viewing it takes the view permission on intents)."""

    class Meta:
        proxy = True
        verbose_name = "intent metrics"
        verbose_name_plural = "intent metrics"
        default_permissions = ()


class JobMetricsPage(Job):
    """The job metrics page's entry on the admin index. A proxy: no table, no permissions of
    its own (viewing it takes the view permission on jobs)."""

    class Meta:
        proxy = True
        verbose_name = "job metrics"
        verbose_name_plural = "job metrics"
        default_permissions = ()


class DeadLetter(Job):
    """The dead letters' entry on the admin index: it opens the job list filtered to
    DEAD_LETTERED. A proxy without permissions of its own, like the metrics pages."""

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"
        default_permissions = ()


class DashboardPage(Job):
    """The dashboard's entry on the admin index (throughput, failures, depth and age charts).
    A proxy without permissions of its own: viewing it takes the view permission on jobs."""

    class Meta:
        proxy = True
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"
        default_permissions = ()
