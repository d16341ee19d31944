"""The RUNLEDGER settings dict, read at call time so override_settings just works."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings

DEFAULTS: dict[str, Any] = {
    "PROMOTE_JOB_TYPES": None,
    "PROMOTION_BATCH_SIZE": 500,
    "PROMOTER_INTERVAL": 0.5,
    "PRUNE_BATCH_SIZE": 1000,
}


class Settings:
    """One typed property per key of ``settings.RUNLEDGER``; checks.py validates the values."""

    @property
    def raw(self) -> dict[str, Any]:
        value = getattr(django_settings, "RUNLEDGER", None)
        return value if isinstance(value, dict) else {}

    def _get(self, key: str) -> Any:
        return self.raw.get(key, DEFAULTS[key])

    @property
    def PROMOTE_JOB_TYPES(self) -> list[str] | None:  # noqa: N802
        """Job types promote_intents handles when --job-type is not given; None means every
        enabled job definition. Default: None."""
        value = self._get("PROMOTE_JOB_TYPES")
        return None if value is None else list(value)

    @property
    def PROMOTION_BATCH_SIZE(self) -> int:  # noqa: N802
        """Rows one promotion pass claims (1 to 1000). Most promote set-based in one statement;
        at most 24 rows a pass take the per-row savepoint path. Default: 500 (a pass has about
        ten statements of fixed cost, so small batches cap the drain rate)."""
        return int(self._get("PROMOTION_BATCH_SIZE"))

    @property
    def PROMOTER_INTERVAL(self) -> float:  # noqa: N802
        """Seconds promote_intents --loop waits after a pass that found the queue drained.
        Default: 0.5."""
        return float(self._get("PROMOTER_INTERVAL"))

    @property
    def PRUNE_BATCH_SIZE(self) -> int:  # noqa: N802
        """Intents one prune_intents statement deletes (1 to 1000). Default: 1000."""
        return int(self._get("PRUNE_BATCH_SIZE"))


conf = Settings()
