"""A tiny installed app whose ``jobs.py`` handlers the worker subprocesses of the tests run.

The job type names live here, not in ``jobs.py``: the test process reads them without
importing the handlers, so its own registry (what ``run_jobs`` runs) never contains them.
"""

NOOP = "worker_tests.noop"
BLOCK = "worker_tests.block"
FLAKY = "worker_tests.flaky"
JOB_TYPES = (NOOP, BLOCK, FLAKY)
