"""The exactly-once tests' app: a table of effects that atomic handlers write, one row per run
of a handler's body, and the handlers the worker subprocesses run (``jobs.py``).

Job type names live here so the test process reads them without importing the handlers.
"""

EFFECT = "exact.effect"
"""atomic=True: writes an effect row, optionally waits for a release file, then succeeds."""
LATE = "exact.late"
"""A plain handler whose effect (and optional wait for its release file) is in a
``complete_atomically`` block at its end."""
SLICES = "exact.slices"
"""atomic=True: one effect row per slice, ``ContinueJob`` until ``payload["slices"]`` ran."""
JOB_TYPES = (EFFECT, LATE, SLICES)
