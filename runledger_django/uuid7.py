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


def uuid7_many(count: int) -> list[uuid.UUID]:
    """``count`` UUIDv7s in creation order, as ``count`` calls of :func:`uuid7` would make
    them, with one lock and one read of the random source for the lot (a bulk enqueue's ids)."""
    global _last_ms, _last_counter
    entropy = os.urandom(10 * count)
    ids: list[uuid.UUID] = []
    append = ids.append
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        ms, counter = _last_ms, _last_counter
        for offset in range(0, 10 * count, 10):
            rand = int.from_bytes(entropy[offset : offset + 10], "big")
            if now_ms > ms:
                ms = now_ms
                counter = rand >> 68
            else:
                counter += 1
                if counter > 0xFFF:
                    ms += 1
                    counter = 0
            append(
                uuid.UUID(
                    int=((ms & 0xFFFF_FFFF_FFFF) << 80)
                    | (0x7 << 76)
                    | (counter << 64)
                    | (0b10 << 62)
                    | (rand & 0x3FFF_FFFF_FFFF_FFFF)
                )
            )
        _last_ms, _last_counter = ms, counter
    return ids
