"""core/_stamps.py: opaque ids and UTC timestamp text (no receipt code involved)."""

from openfunctions.core import _stamps, new_id, utc_timestamp


def test_ids_are_opaque_random_hex():
    ids = {new_id("rcpt") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.startswith("rcpt_") and len(i) == 37 and all(c in "0123456789abcdef" for c in i[5:]) for i in ids)


def test_utc_timestamp_is_rfc3339_microseconds_and_tracks_the_clock():
    import datetime as dt
    import re

    before = dt.datetime.now(dt.UTC)
    stamps = [utc_timestamp() for _ in range(2000)]
    after = dt.datetime.now(dt.UTC)
    for s in stamps:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z", s), s
    parsed = [dt.datetime.fromisoformat(s.replace("Z", "+00:00")) for s in stamps]
    assert parsed == sorted(parsed)
    # Every stamp lies within the real clock's window (second boundaries: the next test).
    assert before - dt.timedelta(microseconds=1) <= parsed[0] and parsed[-1] <= after


def test_utc_timestamp_is_exact_around_second_boundaries(monkeypatch):
    # The date text is cached per second: drive a fake clock across
    # boundaries (forwards, backwards, ±1 ns/µs) and compare with datetime.
    import datetime as dt

    def reference(ns: int) -> str:
        t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=ns // 1000)
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    base = 1_796_000_000 * 10**9  # 2026-11-30
    clock = [0]
    monkeypatch.setattr(_stamps.time, "time_ns", lambda: clock[0])
    monkeypatch.setattr(_stamps, "_second_text", (-1, ""))
    for s in (0, 1, 59, 60, 3599, 3600, 86399, 86400, 1, 0):
        for delta in (-1001, -1000, -999, -1, 0, 1, 999, 1000, 999_999_999):
            clock[0] = base + s * 10**9 + delta
            assert _stamps.utc_timestamp() == reference(clock[0]), clock[0]
