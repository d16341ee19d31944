from __future__ import annotations

from django.apps import AppConfig


class OutageAppConfig(AppConfig):
    name = "tests.outage.app"
    label = "outage_app"
