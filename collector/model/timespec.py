"""WHEN values of ``--since``/``--until`` and the durations of ``--step``/``--max-age``/``--chunk``.

Pure functions: the current time is an argument, so they are tested without a clock. Times
are unix seconds (float) at the edges and integer milliseconds inside the collector, the
resolution Prometheus stores, so timestamps compare exactly.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from functools import lru_cache

MONITOR = "monitor"
"""The WHEN that stands for the last monitor session; the caller resolves it in Prometheus."""

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0,
          "y": 31536000.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)
# Unix seconds below this (September 2001) are taken for a mistyped duration ("--since 90").
_OLDEST_UNIX = 1e9
_NEWEST_UNIX = 253402300800  # 10000-01-01: RFC 3339 has four digits for the year
_FORMS = "RFC 3339 (2024-05-01T12:00:00Z), unix seconds, a duration back from now (90s, 15m, 2h)"


def parse_duration(text: str) -> float:
    """Seconds of a Prometheus-style duration (``90s``, ``1h30m``, ``500ms``) or a number.

    Raises ValueError naming the accepted forms.
    """
    text = text.strip()
    if _NUMBER.fullmatch(text):
        return float(text)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration (e.g. 15s, 2m, 1h30m, 500ms)")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def parse_positive_duration(text: str) -> float:
    """A duration that must be more than zero (a step, a chunk, an age)."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"{text!r} must be more than zero")
    return seconds


def parse_rfc3339(text: str) -> float:
    """Unix seconds of an RFC 3339 date-time; the offset (``Z`` or ``+02:00``) is required."""
    match = _RFC3339.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not an RFC 3339 time (e.g. 2024-05-01T12:00:00Z)")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, offset = match.group(7) or "", match.group(8)
    if offset in ("Z", "z"):
        tz = timezone.utc
    else:
        sign, hours, minutes = -1 if offset[0] == "-" else 1, int(offset[1:3]), int(offset[4:6])
        if hours > 23 or minutes > 59:
            raise ValueError(f"{text!r}: the offset {offset} is not a time zone's "
                             "(from -23:59 to +23:59)")
        tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=tz)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a valid time ({exc})") from None
    return moment.timestamp() + (float(fraction) if fraction else 0.0)


def parse_when(text: str, now: float) -> float | str:
    """Unix seconds for a WHEN, or MONITOR for ``monitor``.

    Accepts ``now``, ``monitor``, RFC 3339, unix seconds and durations back from ``now``.
    Raises ValueError with the accepted forms.
    """
    text = text.strip()
    if text in ("now", MONITOR):
        return now if text == "now" else MONITOR
    if _NUMBER.fullmatch(text):
        value = float(text)
        if value < _OLDEST_UNIX:
            raise ValueError(f"{text!r} as unix seconds is before 2001; for a duration back "
                             f"from now add a unit, e.g. {text}s or {text}m")
    elif text[:1].isdigit() and "-" in text:
        value = parse_rfc3339(text)
    else:
        try:  # further back than 1970 is everything Prometheus can hold
            value = max(0.0, now - parse_duration(text))
        except ValueError:
            raise ValueError(f"{text!r} is not a time: use {_FORMS}, 'now' or 'monitor'"
                             ) from None
    if not 0 <= value < _NEWEST_UNIX:
        raise ValueError(f"{text!r} is {'before 1970' if value < 0 else 'after 9999'}: "
                         "Prometheus holds nothing there")
    return value


def to_ms(seconds: float) -> int:
    """Milliseconds, Prometheus' own resolution."""
    return round(seconds * 1000)


@lru_cache(maxsize=8192)
def _rfc3339_second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def format_rfc3339(ms: int) -> str:
    """``2024-05-01T12:00:00.250Z``: UTC, always with milliseconds so columns line up.

    The seconds are formatted once each (an export writes several rows per scrape)."""
    return f"{_rfc3339_second(ms // 1000)}.{ms % 1000:03d}Z"


def format_duration(seconds: float) -> str:
    """The largest whole unit: 120 -> "2m", 3600 -> "1h", 90 -> "90s", 0.5 -> "500ms"."""
    ms = round(seconds * 1000)
    for unit in ("w", "d", "h", "m", "s"):
        size = round(_UNITS[unit] * 1000)
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
