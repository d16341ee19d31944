"""The worker runtime: handler registration, job execution, and the worker loop.

This layer schedules and delegates: every database write goes through ``services``.
"""
