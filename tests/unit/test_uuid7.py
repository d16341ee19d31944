"""Application-made UUIDv7 ids: layout bits and creation order within a process."""

from __future__ import annotations

import itertools
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from runledger_django import uuid7 as uuid7_module
from runledger_django.uuid7 import uuid7


def unix_ms(value: uuid.UUID) -> int:
    return value.int >> 80


def keep_generator_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Restore the generator's last millisecond and counter after a test moves the clock."""
    monkeypatch.setattr(uuid7_module, "_last_ms", uuid7_module._last_ms)
    monkeypatch.setattr(uuid7_module, "_last_counter", uuid7_module._last_counter)


def test_uuid7__version_and_variant() -> None:
    for _ in range(1000):
        value = uuid7()
        assert value.version == 7
        assert value.variant == uuid.RFC_4122


def test_uuid7__timestamp_is_unix_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    value = uuid7()
    after = time.time_ns() // 1_000_000
    # The counter may borrow at most a few future milliseconds after heavy use.
    assert before <= unix_ms(value) <= after + 5


def test_uuid7__many_in_a_row__strictly_increasing() -> None:
    values = [uuid7() for _ in range(20_000)]
    assert values == sorted(values)
    assert len(set(values)) == len(values)
    assert all(a.bytes < b.bytes for a, b in itertools.pairwise(values))


def test_uuid7__frozen_clock__counter_keeps_order_past_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More than 4096 ids in one millisecond borrow the next millisecond instead of wrapping."""
    frozen = time.time_ns() + 10_000_000_000  # ahead of any id made so far
    keep_generator_state(monkeypatch)
    monkeypatch.setattr(time, "time_ns", lambda: frozen)
    values = [uuid7() for _ in range(10_000)]
    assert values == sorted(values)
    assert len(set(values)) == len(values)
    assert unix_ms(values[0]) == frozen // 1_000_000
    assert unix_ms(values[-1]) > unix_ms(values[0])


def test_uuid7__clock_going_back__order_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    keep_generator_state(monkeypatch)
    first = uuid7()
    monkeypatch.setattr(time, "time_ns", lambda: 0)
    later = [uuid7() for _ in range(100)]
    assert [first, *later] == sorted([first, *later])


def test_uuid7__threads__all_unique() -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        batches = list(pool.map(lambda _: [uuid7() for _ in range(2000)], range(8)))
    values = [value for batch in batches for value in batch]
    assert len(set(values)) == len(values)
    for batch in batches:
        assert batch == sorted(batch)


# --- uuid7_many (the bulk producers' ids) ----------------------------------------------------


def test_uuid7_many__version_variant_and_strictly_increasing() -> None:
    values = uuid7_module.uuid7_many(10_000)
    assert len(values) == 10_000
    assert all(v.version == 7 and v.variant == uuid.RFC_4122 for v in values)
    assert all(a < b for a, b in itertools.pairwise(values))


def test_uuid7_many__interleaved_with_uuid7__one_creation_order() -> None:
    before = uuid7()
    batch = uuid7_module.uuid7_many(5)
    after = uuid7()
    assert before < batch[0] and batch[-1] < after


def test_uuid7_many__counter_exhausted__borrows_the_next_millisecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keep_generator_state(monkeypatch)
    now_ms = time.time_ns() // 1_000_000 + 60_000
    monkeypatch.setattr(uuid7_module, "_last_ms", now_ms)
    monkeypatch.setattr(uuid7_module, "_last_counter", 0xFFE)
    first, second = uuid7_module.uuid7_many(2)
    assert (unix_ms(first), (first.int >> 64) & 0xFFF) == (now_ms, 0xFFF)
    assert (unix_ms(second), (second.int >> 64) & 0xFFF) == (now_ms + 1, 0)


def test_uuid7_many__zero__empty() -> None:
    assert uuid7_module.uuid7_many(0) == []
