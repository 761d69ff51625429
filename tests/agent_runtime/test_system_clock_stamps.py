"""The system clock's event timestamps read as `datetime.isoformat` writes them."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from agent_runtime import clock as clock_module
from agent_runtime.clock import SystemClock, iso_stamp


def _at(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    nanoseconds = int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000 + 789
    monkeypatch.setattr(clock_module.time, "time_ns", lambda: nanoseconds)


@pytest.mark.parametrize("when", [
    datetime(2026, 12, 3, 16, 38, 17, 567345, tzinfo=UTC),
    datetime(2026, 12, 3, 16, 38, 17, 0, tzinfo=UTC),  # isoformat leaves out a zero fraction
    datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2027, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
])
def test_a_stamp_is_the_isoformat_of_the_same_instant(monkeypatch: pytest.MonkeyPatch,
                                                        when: datetime) -> None:
    _at(monkeypatch, when)
    stamp = SystemClock().iso_now()
    assert stamp == when.isoformat()
    assert datetime.fromisoformat(stamp) == when


def test_a_clock_reused_across_seconds_stamps_each_second_anew(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = SystemClock()
    for when in (datetime(2026, 12, 3, 16, 38, 17, 5, tzinfo=UTC),
                 datetime(2026, 12, 3, 16, 38, 18, 5, tzinfo=UTC),
                 datetime(2026, 12, 3, 16, 38, 17, 7, tzinfo=UTC)):
        _at(monkeypatch, when)
        assert clock.iso_now() == when.isoformat()


def test_threads_stamping_at_once_each_read_the_real_time() -> None:
    clock = SystemClock()
    stamps: list[str] = []
    lock = threading.Lock()

    def stamp_many() -> None:
        for _ in range(2000):
            before = datetime.now(UTC)
            stamp = datetime.fromisoformat(clock.iso_now())
            after = datetime.now(UTC)
            with lock:
                stamps.append(f"{before <= stamp <= after}")

    threads = [threading.Thread(target=stamp_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(stamps) == {"True"}


def test_another_clock_is_read_as_it_is() -> None:
    class Fixed:
        def now(self) -> datetime:
            return datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    assert iso_stamp(Fixed().now)() == "2026-01-02T03:04:05+00:00"
    assert iso_stamp(SystemClock().now).__name__ == "iso_now"
