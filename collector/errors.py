"""The two kinds of failure the command line tells apart: bad input (exit 2), and anything
that went wrong while working (exit 1). Messages are one line, meant for a person."""

from __future__ import annotations

import signal


class CollectorError(Exception):
    """A runtime failure: the message says what failed and what to do about it."""


class UsageError(CollectorError):
    """The request itself is wrong (a bad option value, a missing URL, an unknown metric)."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived (``timeout``, a batch system, a closed terminal): raised
    like KeyboardInterrupt, so the staging folder and other partial output are removed on
    the way out instead of the process dying where it stands."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_on_termination() -> None:
    """Turn SIGTERM and SIGHUP into Terminated in this (the main) thread."""

    def handler(signum: int, _frame: object) -> None:
        raise Terminated(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
