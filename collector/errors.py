"""The two kinds of failure the command line tells apart: bad input (exit 2), and anything
that went wrong while working (exit 1). Messages are one line, meant for a person."""

from __future__ import annotations


class CollectorError(Exception):
    """A runtime failure: the message says what failed and what to do about it."""


class UsageError(CollectorError):
    """The request itself is wrong (a bad option value, a missing URL, an unknown metric)."""
