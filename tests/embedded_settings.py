"""Settings for ``manage.py runserver`` on a throwaway embedded server (tests/test_embedded.py).

The data directory comes from RUNLEDGER_EMBEDDED_TEST_DATA_DIR, never the suite's own server.
"""

from __future__ import annotations

import os
from pathlib import Path

from runledger_django.embedded import database_settings

SECRET_KEY = "runledger-embedded-test-not-secret"  # noqa: S105
DEBUG = True
USE_TZ = True
ROOT_URLCONF = "tests.embedded_settings"
urlpatterns: list[object] = []
INSTALLED_APPS: list[str] = []
DATABASES = {"default": database_settings(Path(os.environ["RUNLEDGER_EMBEDDED_TEST_DATA_DIR"]))}
