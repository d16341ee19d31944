"""The exactly-once tests' app (installed by the test settings)."""

from __future__ import annotations

from django.apps import AppConfig


class ExactlyTestsConfig(AppConfig):
    name = "tests.exactly_app"
    label = "runledger_exactly_tests"
    default = True
    default_auto_field = "django.db.models.BigAutoField"
