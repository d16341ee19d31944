"""The smoke project's app: one job handler, found by the worker as a user's would be."""

ECHO = "smoke.echo"
