"""The release's checks: the licence, the wheel inspection, the strict docs build.

CI builds the real wheel and runs tools/release.py on it; these tests prove that the inspection
refuses the wheels it exists to refuse, and that the docs build fails on an unlisted page or a
broken anchor, without building anything large.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import release

ROOT = Path(__file__).resolve().parent.parent
DIST_INFO = f"runledger_django-{release.version()}.dist-info"
LICENSE = (ROOT / "LICENSE").read_bytes()


def test_license__the_apache_license_2_0__whole_text() -> None:
    text = LICENSE.decode()
    assert text.strip().startswith("Apache License\n                           Version 2.0")
    assert "END OF TERMS AND CONDITIONS" in text
    assert all(f"   {n}. " in text for n in range(1, 10))


def wheel_names(files: set[str]) -> list[str]:
    metadata_files = ("METADATA", "WHEEL", "RECORD", "top_level.txt", "licenses/LICENSE")
    return [*sorted(files), *(f"{DIST_INFO}/{name}" for name in metadata_files)]


def inspect(names: list[str], license_text: bytes | None = LICENSE) -> list[str]:
    problems, _ = release.inspect_wheel_names(
        names,
        expected=release._shipped_source_files(),
        dist_info=DIST_INFO,
        license_text=license_text,
    )
    return problems


def test_inspect_wheel_names__every_package_file__no_problem_and_counted() -> None:
    files = release._shipped_source_files()
    problems, counts = release.inspect_wheel_names(
        wheel_names(files), expected=files, dist_info=DIST_INFO, license_text=LICENSE
    )
    assert problems == []
    migrations = list((ROOT / "runledger_django" / "migrations").glob("0*.py"))
    assert counts["migrations"] == len(migrations) > 0
    assert counts["templates"] == len(list((ROOT / "runledger_django" / "templates").rglob("*.*")))


@pytest.mark.parametrize(
    "dropped",
    [
        "runledger_django/migrations/0001_initial.py",
        "runledger_django/templates/admin/runledger/change_list.html",
        "runledger_django/py.typed",
    ],
)
def test_inspect_wheel_names__a_package_file_missing__reported(dropped: str) -> None:
    names = [name for name in wheel_names(release._shipped_source_files()) if name != dropped]
    assert f"missing from the wheel: {dropped}" in inspect(names)


def test_inspect_wheel_names__a_static_file_missing__reported() -> None:
    """A static file in the checkout's package must reach the wheel like a template."""
    static = "runledger_django/static/runledger/app.css"
    problems, _ = release.inspect_wheel_names(
        wheel_names(release._shipped_source_files()),
        expected={*release._shipped_source_files(), static},
        dist_info=DIST_INFO,
        license_text=LICENSE,
    )
    assert problems == [f"missing from the wheel: {static}"]


@pytest.mark.parametrize(
    "extra", ["tests/test_api.py", "runledger_django/tests/test_x.py", "benchmarks/shape_a.py"]
)
def test_inspect_wheel_names__a_development_file__reported(extra: str) -> None:
    problems = inspect([*wheel_names(release._shipped_source_files()), extra])
    assert f"a development file: {extra}" in problems


def test_inspect_wheel_names__no_license_or_another_text__reported() -> None:
    names = wheel_names(release._shipped_source_files())
    assert f"missing from the wheel: {DIST_INFO}/licenses/LICENSE" in inspect(names, None)
    assert "the wheel's LICENSE differs from the checkout's" in inspect(names, b"MIT")


def build_docs(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603  (this interpreter, fixed arguments)
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def docs_copy(tmp_path: Path) -> Path:
    """mkdocs.yml and docs/ copied, so a test can add a page without touching the checkout."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


def test_docs_build__a_page_not_in_the_nav__fails(docs_copy: Path) -> None:
    """A page added later fails the build until the nav lists it."""
    (docs_copy / "docs" / "unlisted.md").write_text("# Unlisted\n")

    result = build_docs(docs_copy)

    assert result.returncode == 1
    assert 'not included in the "nav"' in result.stderr
    assert "- unlisted.md" in result.stderr


def test_docs_build__a_link_to_a_missing_anchor__fails(docs_copy: Path) -> None:
    page = docs_copy / "docs" / "index.md"
    page.write_text(page.read_text() + "\n[gone](operations.md#no-such-heading)\n")

    result = build_docs(docs_copy)

    assert result.returncode == 1
    assert "does not contain an anchor '#no-such-heading'" in result.stderr
