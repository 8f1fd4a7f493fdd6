"""The calendar provider over real .ics files: ranges, recurrence (and what is unsupported), overrides, upcoming."""

from __future__ import annotations

import datetime as dt

import pytest

from openfunctions.core import ToolError
from openfunctions.providers import check_provider_health, context_prompt
from openfunctions.providers.reference import CalendarProvider
from openfunctions.providers.reference._calendar import occurrences, parse_ics

from .conftest import call, connected

pytestmark = pytest.mark.anyio

NOW = dt.datetime(2025, 3, 9, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
async def cal(calendar_dir):
    return await connected(CalendarProvider(calendar_dir, now=lambda: NOW))


def starts(out):
    return [(e["summary"], e["start"]) for e in out["events"]]


async def test_range_with_weekly_exdate_and_duration(cal):
    registry, _ = cal
    out = await registry.execute("calendar_events", {"start": "2025-03-03", "end": "2025-03-05"})
    assert starts(out) == [
        ("First Monday", "2025-03-03T08:00:00+00:00"),
        ("Standup", "2025-03-03T09:00:00+01:00"),
        ("Design review, Apollo", "2025-03-04T14:00:00+00:00"),
        ("Gym", "2025-03-04T18:00:00+00:00"),
    ]
    review = out["events"][2]
    assert review["end"] == "2025-03-04T15:30:00+00:00" and review["description"] == "Bring the engine\nfigures"
    assert review["location"] == "Room 1"
    assert out["events"][0]["recurrence_unsupported"] == "RRULE BYDAY=1MO with FREQ=MONTHLY is not supported"
    assert out["events"][1]["attendees"] == ["Ada Lovelace"]


async def test_exdate_override_count_and_all_day(cal):
    registry, _ = cal
    out = await registry.execute("calendar_events", {"start": "2025-03-05", "end": "2025-03-31", "query": "standup"})
    # the 5th is excluded (EXDATE), the 7th moved to 11:00 (RECURRENCE-ID), COUNT=6 ends the series on the 14th
    assert starts(out) == [
        ("Standup (moved)", "2025-03-07T11:00:00+01:00"),
        ("Standup", "2025-03-10T09:00:00+01:00"),
        ("Standup", "2025-03-12T09:00:00+01:00"),
        ("Standup", "2025-03-14T09:00:00+01:00"),
    ]
    day = await registry.execute("calendar_events", {"start": "2025-03-07"})
    holiday = next(e for e in day["events"] if e["summary"] == "Holiday")
    assert holiday == {**holiday, "all_day": True, "start": "2025-03-06", "end": "2025-03-08"}


async def test_upcoming_uses_the_clock_and_until(cal):
    registry, _ = cal
    out = await registry.execute("calendar_upcoming", {"days": 7})
    assert starts(out) == [
        ("Standup", "2025-03-10T09:00:00+01:00"),
        ("Gym", "2025-03-10T18:00:00+00:00"),  # INTERVAL=2 from the 2nd, UNTIL the 10th (a date: all of that day)
        ("Standup", "2025-03-12T09:00:00+01:00"),
        ("Standup", "2025-03-14T09:00:00+01:00"),
    ]


async def test_event_by_uid_and_refusals(cal):
    registry, _ = cal
    ev = await registry.execute("calendar_event", {"uid": "standup@example"})
    assert ev["rrule"] == "FREQ=WEEKLY;BYDAY=MO,WE,FR;COUNT=6" and ev["overrides"] == 1
    for params, code in [({"uid": "nope"}, "reference_not_found"),
                         ({"start": "2025-03-05", "end": "2025-03-01"}, "calendar_range_invalid"),
                         ({"start": "the day before yesterday"}, "calendar_range_invalid"),
                         ({"start": "2020-01-01", "end": "2025-01-01"}, "calendar_range_invalid")]:
        tool = "calendar_event" if "uid" in params else "calendar_events"
        result = await call(registry, tool, params)
        assert isinstance(result.error, ToolError) and result.error.code == code, params


async def test_bad_event_is_a_problem_not_a_failure(cal):
    _, conn = cal
    [health] = await check_provider_health([conn])
    assert health.status == "degraded" and "No start" not in health.message and "no DTSTART" in health.message
    assert health.details == {"events": 6, "unsupported_recurrences": 1, "files": 2}
    block = await context_prompt([conn])
    assert block.startswith("Calendar: 2 event(s) in the next 48 hours")


def test_daily_series_across_dst_keeps_wall_clock():
    text = ("BEGIN:VEVENT\nUID:x\nSUMMARY:Walk\nDTSTART;TZID=Europe/Berlin:20250328T080000\n"
            "DTEND;TZID=Europe/Berlin:20250328T083000\nRRULE:FREQ=DAILY\nEND:VEVENT\n")
    [ev], problems = parse_ics(text, source="t.ics")
    got = occurrences(ev, dt.datetime(2025, 3, 29, tzinfo=dt.UTC), dt.datetime(2025, 3, 31, tzinfo=dt.UTC))
    assert [s.isoformat() for s in got] == ["2025-03-29T08:00:00+01:00", "2025-03-30T08:00:00+02:00"]
    assert problems == []


def test_series_that_run_past_year_9999_end_there():
    # A yearly (or monthly) series past 9999 used to spin forever: every later date was "skipped"
    # like a 31st in a 30-day month, so the candidates never ended; a daily step past it raised OverflowError.
    base = "BEGIN:VEVENT\nUID:x\nSUMMARY:Birthday\nDTSTART:20200601T080000Z\nDTEND:20200601T090000Z\nRRULE:{}\nEND:VEVENT\n"
    lo, hi = dt.datetime(9999, 1, 1, tzinfo=dt.UTC), dt.datetime(9999, 12, 31, tzinfo=dt.UTC)
    for rule, expected in [("FREQ=YEARLY", ["9999-06-01T08:00:00+00:00"]),
                           ("FREQ=MONTHLY;INTERVAL=1000", []),  # 2020-06, then past 9999 before reaching lo
                           ("FREQ=DAILY;INTERVAL=2914269", ["9999-06-01T08:00:00+00:00"])]:
        [ev], problems = parse_ics(base.format(rule), source="t.ics")
        assert problems == []
        assert [s.isoformat() for s in occurrences(ev, lo, hi)] == expected, rule
    # the last occurrence would end in year 10000: the series ends before it (it raised OverflowError)
    [ev], _ = parse_ics("BEGIN:VEVENT\nUID:y\nSUMMARY:Night\nDTSTART:20201231T080000Z\nDTEND:20210101T070000Z\n"
                        "RRULE:FREQ=YEARLY\nEND:VEVENT\n", source="t.ics")
    assert occurrences(ev, dt.datetime(9999, 12, 1, tzinfo=dt.UTC), dt.datetime(9999, 12, 31, 23, tzinfo=dt.UTC)) == []
    assert len(occurrences(ev, dt.datetime(9998, 12, 1, tzinfo=dt.UTC), dt.datetime(9998, 12, 31, 23, tzinfo=dt.UTC))) == 1


async def test_a_start_on_the_last_day_without_an_end_is_refused(cal):
    registry, _ = cal
    result = await call(registry, "calendar_events", {"start": "9999-12-31"})
    assert isinstance(result.error, ToolError) and result.error.code == "calendar_range_invalid"
    assert "give an end" in result.error.message


def test_single_file_root(calendar_dir):
    provider = CalendarProvider(calendar_dir / "home.ics")
    assert provider.files == ["home.ics"]
