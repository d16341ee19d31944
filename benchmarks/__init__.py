"""Benchmarks of runledger_django against plain Django and the queues a team would otherwise pick.

Run them with ``python3 dev.py bench`` (``--quick``, ``--only a,c``); see ``benchmarks/run.py``.
"""
