"""Check a worker's health file: ``python -m runledger_django.healthcheck PATH --max-age 60``.

For exec probes and container ``HEALTHCHECK`` lines where an HTTP probe cannot reach the
worker. It imports the standard library only (never Django or the project's settings), so a
probe costs a few milliseconds, not an application start.

Exit 0: the file exists, parses and was written within ``--max-age`` seconds (and, with
``--ready``, the worker called itself ready). Exit 1 otherwise, with the reason on stderr.
The worker rewrites the file from its supervisor loop, so a stale file means a loop that
stopped turning, and a missing one a worker that is gone (a clean exit removes it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
DEFAULT_MAX_AGE_SECONDS = 60.0


def check(path: Path, *, max_age: float, ready: bool = False, now: float | None = None) -> str:
    """Why the file says the worker is unhealthy; an empty string when it is healthy."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"{path}: no health file (the worker is not running)"
    except OSError as error:
        return f"{path}: cannot read the health file: {error}"
    try:
        body = json.loads(text)
        written_at = float(body["written_at"])
    except (ValueError, TypeError, KeyError):
        return f"{path}: the health file is not a runledger health file"
    age = (time.time() if now is None else now) - written_at
    if age > max_age:
        return f"{path}: stale, written {age:.1f} s ago (more than {max_age:g} s)"
    if ready and body.get("ready") is not True:
        return f"{path}: the worker is not ready (database {body.get('database')!r})"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runledger_django.healthcheck",
        description="Exit 0 if a runledger worker's health file is fresh, else 1.",
    )
    parser.add_argument("path", type=Path, help="the file given to runledger_worker --health-file")
    parser.add_argument(
        "--max-age",
        type=float,
        default=DEFAULT_MAX_AGE_SECONDS,
        metavar="SECONDS",
        help=f"the oldest acceptable write (default {DEFAULT_MAX_AGE_SECONDS:g})",
    )
    parser.add_argument(
        "--ready",
        action="store_true",
        help="also require the worker to be ready (started, database reachable, not stopping)",
    )
    options = parser.parse_args(argv)
    problem = check(options.path, max_age=options.max_age, ready=options.ready)
    if problem:
        sys.stderr.write(problem + "\n")
        return EXIT_UNHEALTHY
    return EXIT_HEALTHY


if __name__ == "__main__":
    sys.exit(main())
