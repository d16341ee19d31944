"""The harness's own Django app: the handlers its runledger_worker processes run (jobs.py)."""
