"""Column defaults every runledger table shares."""

from __future__ import annotations

from django.db import models

# now() is the transaction's start time, the reference's default: one transaction's rows share
# it, as the promotion UPDATEs do. Django's Now() would give statement_timestamp() instead.
TRANSACTION_NOW = models.Func(function="now", output_field=models.DateTimeField())
