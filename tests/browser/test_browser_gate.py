"""Without Chromium the browser tests skip, unless RUNLEDGER_REQUIRE_BROWSER=1 makes them fail."""

from __future__ import annotations

import pytest

from tests.browser.test_admin_browser import _unavailable


def test_unavailable__browser_not_required__skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNLEDGER_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="install Debian's chromium"):
        _unavailable("/usr/bin/chromium is missing")


def test_unavailable__browser_required__fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNLEDGER_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="RUNLEDGER_REQUIRE_BROWSER=1 requires"):
        _unavailable("/usr/bin/chromium is missing")
