"""Time-ordered UUIDv7 ids made in Python (uuid.uuid7 only arrives with Python 3.14)."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_last_counter = 0


def uuid7() -> uuid.UUID:
    """Return a UUIDv7: 48-bit Unix milliseconds, then a 12-bit counter and 62 random bits.

    The counter (RFC 9562 method 1) keeps ids made in the same millisecond in creation order,
    so ``ORDER BY created_at, id`` ties break the way rows were made.
    """
    global _last_ms, _last_counter
    rand = int.from_bytes(os.urandom(10), "big")
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            _last_ms = now_ms
            _last_counter = rand >> 68  # a random 12-bit start leaves room to count up
        else:
            _last_counter += 1
            if _last_counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                _last_ms += 1
                _last_counter = 0
        ms, counter = _last_ms, _last_counter
    value = (ms & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= rand & 0x3FFF_FFFF_FFFF_FFFF
    return uuid.UUID(int=value)
