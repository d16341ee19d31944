"""Reliability harness for runledger_django: recorders, promoters and workers in many processes,
real crashes, one server restart.

Run it from the repository root::

    python -m reliability --seconds 10     # CI size; tests/reliability runs it
    python -m reliability --seconds 300    # the long run, by hand

It starts its own embedded PostgreSQL 18 server in a temporary data directory (never the one
the tests or DATABASE_URL use), so it can restart that server mid-run. See ``harness`` for what
runs and what is checked; the exit status is non-zero when any invariant was violated.
"""
