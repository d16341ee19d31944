"""Importing the backend: a clear ImproperlyConfigured on Django 5.2 (the Python 3.11 leg),
the backend and its task class on Django 6."""

from __future__ import annotations

import importlib
import sys

import django
import pytest
from django.core.exceptions import ImproperlyConfigured


@pytest.mark.skipif(django.VERSION >= (6, 0), reason="the Django 5.2 leg checks the refusal")
def test_import__django_5_2__improperly_configured_naming_the_version() -> None:
    sys.modules.pop("runledger_django.tasks", None)

    with pytest.raises(ImproperlyConfigured, match=r"Django 6\.0.*Django 5\.2"):
        importlib.import_module("runledger_django.tasks")


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks arrived in Django 6.0")
def test_import__django_6__backend_and_task_class() -> None:
    module = importlib.import_module("runledger_django.tasks")

    assert module.__all__ == ["RunledgerTask", "RunledgerTaskBackend", "with_idempotency_key"]
    assert module.RunledgerTaskBackend.task_class is module.RunledgerTask
