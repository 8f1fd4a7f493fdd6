"""Calendars from iCalendar (``.ics``) files as a context provider (``calendar:/path/to/dir-or-file.ics``).

Parsed here (RFC 5545, the parts calendars export): ``VEVENT`` components
with ``UID``, ``SUMMARY``, ``DTSTART``, ``DTEND`` or ``DURATION``,
``LOCATION``, ``DESCRIPTION``, ``STATUS``, ``ORGANIZER``, ``ATTENDEE``,
``RRULE``, ``EXDATE`` and ``RECURRENCE-ID`` (a moved or changed occurrence
replaces the generated one). Lines are unfolded and text unescaped. Times:
``...Z`` is UTC; ``TZID=Area/City`` uses the IANA zone database; a floating
time (no zone) or an unknown TZID is taken in the provider's ``timezone``
(default UTC); a date (``VALUE=DATE``) is an all-day event.

Recurrence (``RRULE``): ``FREQ`` ``DAILY``, ``WEEKLY`` (with ``BYDAY`` of
plain weekdays), ``MONTHLY`` (same day of month) and ``YEARLY`` (same date),
with ``INTERVAL``, ``COUNT`` and ``UNTIL``. Anything else (``BYSETPOS``,
``BYDAY=1MO``, ``BYMONTH``, ``BYHOUR``, ``HOURLY``...) is **not supported**:
such an event is listed at its first occurrence only, with
``recurrence_unsupported`` naming the rule part. Expansion stops after
:data:`MAX_OCCURRENCES` occurrences per event; a query spans at most
:data:`MAX_RANGE_DAYS` days.

Tools (prefix ``calendar``): ``calendar_events`` (a date range),
``calendar_upcoming`` (the next days), ``calendar_event`` (one event by UID);
reviewed parallel-safe reads.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field

from openfunctions.core import ToolDefinition, tool

from .._errors import ProviderError
from .._provider import ContextProvider, ProviderHealth
from ._base import NO_OUTPUT, READ, READ_ONLY, Connected, Limit20of500, Limit100of1000
from ._root import NOT_FOUND, Root, read_bounded, refuse

MAX_ICS_BYTES = 8 << 20
MAX_OCCURRENCES = 5000
MAX_RANGE_DAYS = 731
RANGE_INVALID = "calendar_range_invalid"
_WEEKDAYS = {"MO": 0, "TU": 1, "WE": 2, "TH": 3, "FR": 4, "SA": 5, "SU": 6}
_SUPPORTED_RULE = {"FREQ", "INTERVAL", "COUNT", "UNTIL", "BYDAY", "WKST"}


@dataclass
class Event:
    uid: str
    summary: str
    start: dt.datetime
    end: dt.datetime
    all_day: bool
    source: str
    location: str | None = None
    description: str | None = None
    status: str | None = None
    organizer: str | None = None
    attendees: list[str] = field(default_factory=list)
    rrule: dict[str, str] | None = None
    exdates: set[dt.datetime] = field(default_factory=set)
    recurrence_id: dt.datetime | None = None
    unsupported: str | None = None

    def at(self, start: dt.datetime) -> dict[str, Any]:
        end = start + (self.end - self.start)
        fmt: Callable[[dt.datetime], str] = (lambda d: d.date().isoformat()) if self.all_day else \
            (lambda d: d.isoformat())
        out: dict[str, Any] = {"uid": self.uid, "summary": self.summary, "start": fmt(start), "end": fmt(end),
                               "all_day": self.all_day, "calendar": self.source}
        for key in ("location", "description", "status", "organizer"):
            value = getattr(self, key)
            if value:
                out[key] = value if key != "description" else value[:2000]
        if self.attendees:
            out["attendees"] = self.attendees[:50]
        if self.rrule:
            out["recurring"] = True
        if self.unsupported:
            out["recurrence_unsupported"] = self.unsupported
        return out


def _unfold(text: str) -> list[str]:
    out: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if line[:1] in (" ", "\t") and out:
            out[-1] += line[1:]
        elif line:
            out.append(line)
    return out


def _split(line: str) -> tuple[str, dict[str, str], str]:
    # NAME;PARAM=VALUE;PARAM="quoted:value":VALUE — the first ':' outside quotes ends the parameters.
    quoted = False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif ch == ":" and not quoted:
            head, value = line[:i], line[i + 1 :]
            break
    else:
        return line.upper(), {}, ""
    name, *params = head.split(";")
    pmap = {}
    for p in params:
        k, _, v = p.partition("=")
        pmap[k.upper()] = v.strip('"')
    return name.upper(), pmap, value


def _text(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append("\n" if nxt in "nN" else nxt)
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _zone(name: str | None, default: dt.tzinfo) -> dt.tzinfo:
    if not name:
        return default
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return default


def _when(value: str, params: dict[str, str], tz: dt.tzinfo) -> tuple[dt.datetime, bool]:
    value = value.strip()
    try:
        if params.get("VALUE") == "DATE" or (len(value) == 8 and value.isdigit()):
            d = dt.datetime.strptime(value, "%Y%m%d")
            return d.replace(tzinfo=tz), True
        if value.endswith("Z"):
            return dt.datetime.strptime(value[:-1], "%Y%m%dT%H%M%S").replace(tzinfo=dt.UTC), False
        return dt.datetime.strptime(value, "%Y%m%dT%H%M%S").replace(tzinfo=_zone(params.get("TZID"), tz)), False
    except ValueError:
        raise ValueError(f"not an iCalendar date or time: {value!r}") from None


def _duration(value: str) -> dt.timedelta:
    sign = -1 if value.startswith("-") else 1
    value = value.lstrip("+-")
    if not value.startswith("P"):
        raise ValueError(f"not an iCalendar duration: {value!r}")
    total = dt.timedelta()
    num = ""
    in_time = False
    units = {"W": dt.timedelta(weeks=1), "D": dt.timedelta(days=1)}
    tunits = {"H": dt.timedelta(hours=1), "M": dt.timedelta(minutes=1), "S": dt.timedelta(seconds=1)}
    for ch in value[1:]:
        if ch == "T":
            in_time = True
        elif ch.isdigit():
            num += ch
        else:
            unit = (tunits if in_time else units).get(ch)
            if unit is None or not num:
                raise ValueError(f"not an iCalendar duration: {value!r}")
            total += int(num) * unit
            num = ""
    return sign * total


def parse_ics(text: str, *, source: str, tz: dt.tzinfo = dt.UTC) -> tuple[list[Event], list[str]]:
    """The events of one calendar file and the problems met (a bad event is skipped, not fatal)."""
    events: list[Event] = []
    problems: list[str] = []
    props: list[tuple[str, dict[str, str], str]] | None = None
    depth = 0
    for line in _unfold(text):
        name, params, value = _split(line)
        if name == "BEGIN":
            if value.upper() == "VEVENT" and props is None:
                props, depth = [], 0
            elif props is not None:
                depth += 1  # a VALARM inside the event
            continue
        if name == "END":
            if props is not None and depth:
                depth -= 1
            elif props is not None and value.upper() == "VEVENT":
                try:
                    events.append(_event(props, source, tz))
                except ValueError as exc:
                    problems.append(f"{source}: event skipped: {exc}")
                props = None
            continue
        if props is not None and not depth:
            props.append((name, params, value))
    return events, problems


def _event(props: list[tuple[str, dict[str, str], str]], source: str, tz: dt.tzinfo) -> Event:
    first: dict[str, tuple[dict[str, str], str]] = {}
    attendees: list[str] = []
    exdates: set[dt.datetime] = set()
    for name, params, value in props:
        if name == "ATTENDEE":
            attendees.append(params.get("CN") or value.removeprefix("mailto:").removeprefix("MAILTO:"))
        elif name == "EXDATE":
            for v in value.split(","):
                exdates.add(_when(v, params, tz)[0])
        else:
            first.setdefault(name, (params, value))
    if "DTSTART" not in first:
        raise ValueError("no DTSTART")
    start, all_day = _when(first["DTSTART"][1], first["DTSTART"][0], tz)
    if "DTEND" in first:
        end = _when(first["DTEND"][1], first["DTEND"][0], tz)[0]
    elif "DURATION" in first:
        end = start + _duration(first["DURATION"][1])
    else:
        end = start + (dt.timedelta(days=1) if all_day else dt.timedelta())
    if end < start:
        raise ValueError(f"DTEND before DTSTART in {first.get('SUMMARY', ({}, '?'))[1]!r}")
    ev = Event(uid=first.get("UID", ({}, ""))[1] or f"{source}#{start.isoformat()}",
               summary=_text(first.get("SUMMARY", ({}, ""))[1]), start=start, end=end, all_day=all_day,
               source=source, attendees=attendees, exdates=exdates)
    for key, attr in (("LOCATION", "location"), ("DESCRIPTION", "description"), ("STATUS", "status")):
        if key in first:
            setattr(ev, attr, _text(first[key][1]))
    if "ORGANIZER" in first:
        p, v = first["ORGANIZER"]
        ev.organizer = p.get("CN") or v.removeprefix("mailto:").removeprefix("MAILTO:")
    if "RECURRENCE-ID" in first:
        ev.recurrence_id = _when(first["RECURRENCE-ID"][1], first["RECURRENCE-ID"][0], tz)[0]
    if "RRULE" in first:
        rule = {}
        for part in first["RRULE"][1].split(";"):
            k, _, v = part.partition("=")
            if k:
                rule[k.upper()] = v.upper()
        ev.rrule = rule
        ev.unsupported = _unsupported(rule)
    return ev


def _unsupported(rule: dict[str, str]) -> str | None:
    extra = sorted(set(rule) - _SUPPORTED_RULE)
    if extra:
        return f"RRULE parts {', '.join(extra)} are not supported"
    freq = rule.get("FREQ")
    if freq not in ("DAILY", "WEEKLY", "MONTHLY", "YEARLY"):
        return f"RRULE FREQ={freq} is not supported"
    if "BYDAY" in rule and (freq != "WEEKLY" or any(d not in _WEEKDAYS for d in rule["BYDAY"].split(","))):
        return f"RRULE BYDAY={rule['BYDAY']} with FREQ={freq} is not supported"
    return None


def _add_months(d: dt.datetime, months: int) -> dt.datetime | None:
    """``d`` moved by ``months``; None where that month lacks the day; OverflowError past the last year."""
    y, m = divmod(d.month - 1 + months, 12)
    if d.year + y > dt.MAXYEAR:
        # not None: a series whose every later month is "skipped" would never yield, and never end
        raise OverflowError(f"year {d.year + y} is past {dt.MAXYEAR}")
    try:
        return d.replace(year=d.year + y, month=m + 1)
    except ValueError:  # the 31st in a 30-day month: RFC 5545 skips it
        return None


def occurrences(ev: Event, lo: dt.datetime, hi: dt.datetime) -> list[dt.datetime]:
    """Start times of ``ev``'s occurrences that overlap ``[lo, hi)``."""
    length = ev.end - ev.start

    def overlaps(s: dt.datetime, end: dt.datetime) -> bool:
        return s < hi and (end > lo or (end == s and s >= lo))

    if not ev.rrule or ev.unsupported:
        return [ev.start] if overlaps(ev.start, ev.end) else []
    rule = ev.rrule
    interval = max(1, int(rule.get("INTERVAL", "1") or 1))
    count = int(rule["COUNT"]) if rule.get("COUNT", "").isdigit() else None
    until = None
    if rule.get("UNTIL"):
        until = _when(rule["UNTIL"], {}, ev.start.tzinfo or dt.UTC)[0]
        if len(rule["UNTIL"]) == 8:
            until += dt.timedelta(days=1) - dt.timedelta(microseconds=1)
    freq = rule["FREQ"]
    out: list[dt.datetime] = []
    produced = 0
    naive_start = ev.start.replace(tzinfo=None)  # step in wall-clock time: a 9:00 meeting stays at 9:00 across DST
    tz = ev.start.tzinfo

    def candidates() -> Iterator[dt.datetime]:
        k = 0
        while True:
            try:
                if freq == "DAILY":
                    yield naive_start + dt.timedelta(days=k * interval)
                elif freq == "WEEKLY":
                    days = sorted(_WEEKDAYS[d] for d in rule.get("BYDAY", "").split(",") if d) or [naive_start.weekday()]
                    week0 = naive_start - dt.timedelta(days=naive_start.weekday()) + dt.timedelta(weeks=k * interval)
                    for wd in days:
                        c = week0 + dt.timedelta(days=wd)
                        if c >= naive_start:
                            yield c
                else:
                    monthly = _add_months(naive_start, (1 if freq == "MONTHLY" else 12) * k * interval)
                    if monthly is not None:
                        yield monthly
            except OverflowError:
                return  # the series runs past year 9999: no later date exists
            k += 1

    for c in candidates():
        s = c.replace(tzinfo=tz)
        if until is not None and s > until:
            break
        if count is not None and produced >= count:
            break
        produced += 1
        if produced > MAX_OCCURRENCES * 20 or s >= hi:
            break
        if s in ev.exdates:
            continue
        try:
            end = s + length
        except OverflowError:
            break  # it would end after year 9999, which no date can say; so would every later one
        if overlaps(s, end):
            out.append(s)
            if len(out) >= MAX_OCCURRENCES:
                break
    return out


class Calendars:
    """The events of the ``.ics`` files under a root (re-parsed when a file changes)."""

    def __init__(self, root: Root, files: list[str] | None, tz: dt.tzinfo) -> None:
        self.root, self.files, self.tz = root, files, tz
        self._cache: dict[str, tuple[tuple[int, int], list[Event], list[str]]] = {}

    def paths(self) -> list[Path]:
        if self.files is not None:
            return [self.root.resolve(f) for f in self.files]
        return list(self.root.walk((".ics",), limit=1000))

    def load(self) -> tuple[list[Event], list[str]]:
        events: list[Event] = []
        problems: list[str] = []
        for path in self.paths():
            st = path.stat()
            stamp = (st.st_size, st.st_mtime_ns)
            rel = self.root.relative(path)
            hit = self._cache.get(rel)
            if hit is None or hit[0] != stamp:
                text, cut = read_bounded(path, MAX_ICS_BYTES)
                evs, probs = parse_ics(text, source=rel, tz=self.tz)
                if cut:
                    probs.append(f"{rel}: over {MAX_ICS_BYTES} bytes; the rest was not read")
                hit = (stamp, evs, probs)
                self._cache[rel] = hit
            events.extend(hit[1])
            problems.extend(hit[2])
        return events, problems

    def between(self, lo: dt.datetime, hi: dt.datetime, query: str | None = None) -> list[dict[str, Any]]:
        events, _ = self.load()
        overrides = {(e.uid, e.recurrence_id) for e in events if e.recurrence_id is not None}
        rows: list[tuple[dt.datetime, dict[str, Any]]] = []
        for ev in events:
            if query and query.lower() not in f"{ev.summary}\n{ev.location or ''}\n{ev.description or ''}".lower():
                continue
            if ev.recurrence_id is not None:
                starts = [ev.start] if occurrences(dataclass_copy(ev), lo, hi) else []
            else:
                starts = [s for s in occurrences(ev, lo, hi) if (ev.uid, s) not in overrides]
            rows.extend((s, ev.at(s)) for s in starts)
        rows.sort(key=lambda r: (r[0], r[1]["summary"]))
        return [r for _, r in rows]


def dataclass_copy(ev: Event) -> Event:
    """An override occurrence is a single event: expand it without the series' rule."""
    import dataclasses

    return dataclasses.replace(ev, rrule=None)


def _parse_bound(value: str, tz: dt.tzinfo, what: str) -> dt.datetime:
    try:
        d = dt.datetime.fromisoformat(value)
    except ValueError:
        raise refuse(RANGE_INVALID, f"{what} {value!r} is not an ISO date or date-time (e.g. 2025-03-01 or "
                                    "2025-03-01T09:00:00+01:00)") from None
    return d if d.tzinfo is not None else d.replace(tzinfo=tz)


IsoArg = Annotated[str, Field(min_length=10, max_length=40)]


def calendar_tools(cals: Calendars, prefix: str, now: Callable[[], dt.datetime]) -> list[ToolDefinition]:
    common: dict[str, Any] = {"capability": READ, "annotations": READ_ONLY, "tags": ("calendar",), **NO_OUTPUT}

    @tool(f"{prefix}_events", **common,
          tests=[{"name": "end before start refused", "arguments": {"start": "2025-03-05", "end": "2025-03-01"},
                  "error": RANGE_INVALID},
                 {"name": "bounded by the limit", "arguments": {"start": "2025-01-01", "end": "2025-12-31", "limit": 3},
                  "check": lambda r: len(r["events"]) <= 3}])
    def events(start: IsoArg, end: IsoArg | None = None, query: Annotated[str, Field(max_length=200)] | None = None,
               limit: Limit100of1000 = 100) -> dict[str, Any]:
        """Events between two dates or times (ISO 8601; end defaults to a day after start), recurring events
        expanded, optionally only those whose text contains a query.

        Args:
            start: e.g. 2025-03-01
            end: exclusive; e.g. 2025-03-08
        """
        lo = _parse_bound(start, cals.tz, "start")
        try:
            hi = _parse_bound(end, cals.tz, "end") if end else lo + dt.timedelta(days=1)
        except OverflowError:
            raise refuse(RANGE_INVALID, f"start {lo.isoformat()} leaves no day before year {dt.MAXYEAR} ends; "
                                        "give an end") from None
        if hi <= lo:
            raise refuse(RANGE_INVALID, f"end {hi.isoformat()} is not after start {lo.isoformat()}")
        if hi - lo > dt.timedelta(days=MAX_RANGE_DAYS):
            raise refuse(RANGE_INVALID, f"a range spans at most {MAX_RANGE_DAYS} days")
        rows = cals.between(lo, hi, query)
        return {"start": lo.isoformat(), "end": hi.isoformat(), "count": len(rows), "events": rows[:limit],
                "truncated": len(rows) > limit}

    @tool(f"{prefix}_upcoming", **common,
          tests=[{"name": "bounded", "arguments": {"days": 1, "limit": 1}, "check": lambda r: len(r["events"]) <= 1}])
    def upcoming(days: Annotated[int, Field(ge=1, le=366)] = 7, limit: Limit20of500 = 20) -> dict[str, Any]:
        """The events from now over the next days (default 7), soonest first."""
        lo = now()
        hi = lo + dt.timedelta(days=days)
        rows = cals.between(lo, hi)
        return {"now": lo.isoformat(), "until": hi.isoformat(), "count": len(rows), "events": rows[:limit],
                "truncated": len(rows) > limit}

    @tool(f"{prefix}_event", **common,
          tests=[{"name": "unknown uid", "arguments": {"uid": "no-such-event@openfunctions.invalid"},
                  "error": NOT_FOUND}])
    def event(uid: Annotated[str, Field(min_length=1, max_length=500)]) -> dict[str, Any]:
        """One event by its UID: details, attendees, its recurrence rule."""
        evs = [e for e in cals.load()[0] if e.uid == uid]
        if not evs:
            raise refuse(NOT_FOUND, f"no event with UID {uid!r}", uid=uid)
        series = next((e for e in evs if e.recurrence_id is None), evs[0])
        out = series.at(series.start)
        if series.rrule:
            out["rrule"] = ";".join(f"{k}={v}" for k, v in series.rrule.items())
        out["overrides"] = len([e for e in evs if e.recurrence_id is not None])
        return out

    return [events, upcoming, event]


class CalendarProvider(ContextProvider):
    """ICS files: a directory of them, or one file. ``timezone`` (IANA name) for floating times; ``now`` a clock."""

    def __init__(self, root: str | os.PathLike[str], *, id: str = "calendar", prefix: str | None = None,
                 name: str | None = None, timezone: str = "UTC",
                 now: Callable[[], dt.datetime] | None = None) -> None:
        super().__init__(id=id, name=name or "Calendar", domains=("calendar",),
                         description="Calendars from .ics files: events in a range, upcoming events")
        path = Path(root)
        files = None
        if path.suffix.lower() == ".ics" and not path.is_dir():
            files, path = [path.name], path.parent
        self.root = Root(path, what="calendar directory")
        try:
            self.tz: dt.tzinfo = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ProviderError(f"calendar provider: timezone {timezone!r} is not an IANA zone name") from None
        self.files = files
        self.prefix = prefix or id
        self.now = now or (lambda: dt.datetime.now(self.tz))

    async def connect(self) -> Connected:
        self.root.check()
        cals = Calendars(self.root, self.files, self.tz)
        return Connected(self, calendar_tools(cals, self.prefix, self.now),
                         lambda: _context(cals, self.prefix, self.now()), lambda: _health(cals, self.id))


def _context(cals: Calendars, prefix: str, now: dt.datetime) -> str:
    rows = cals.between(now, now + dt.timedelta(days=2))
    head = f"Calendar: {len(rows)} event(s) in the next 48 hours (tools {prefix}_events, {prefix}_upcoming)."
    return "\n".join([head, *(f"- {r['start']} {r['summary']}" for r in rows[:8])])


def _health(cals: Calendars, pid: str) -> ProviderHealth:
    try:
        cals.root.check()
        events, problems = cals.load()
    except Exception as exc:
        return ProviderHealth(pid, "down", getattr(exc, "message", str(exc)))
    unsupported = sum(1 for e in events if e.unsupported)
    return ProviderHealth(pid, "degraded" if problems else "up", "; ".join(problems[:3]) or None, tools=3,
                          details={"events": len(events), "unsupported_recurrences": unsupported,
                                   "files": len(cals.paths())})


def calendar_provider(root: str | os.PathLike[str], **options: Any) -> CalendarProvider:
    """The ``calendar`` entry point: ``calendar:/path/to/calendars`` (a directory or one ``.ics`` file)."""
    return CalendarProvider(root, **options)


__all__ = ["CalendarProvider", "Event", "calendar_provider", "calendar_tools", "occurrences", "parse_ics"]
