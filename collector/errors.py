"""The two kinds of failure the command line tells apart: bad input (exit 2), and anything
that went wrong while working (exit 1). Messages are one line, meant for a person.

A message names the settings it asks to change with ``setting("chunk")``: a Python caller
reads the keyword (``chunk``), the command line its option (``--chunk``), from one text."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable

_SETTING = re.compile(r"\{setting:([a-z_]+)\}")


def setting(name: str) -> str:
    """``name`` (a keyword argument) as a message writes it, to be worded by its reader."""
    return f"{{setting:{name}}}"


def keyword(name: str) -> str:
    return name


def option(name: str) -> str:
    """The command line's option for a keyword: ``password_file`` is ``--password-file``."""
    return "--" + name.replace("_", "-")


class CollectorError(Exception):
    """A runtime failure: the message says what failed and what to do about it. ``str()``
    names settings by their keyword; ``worded(option)`` by their command-line option."""

    def __str__(self) -> str:
        return self.worded(keyword)

    def worded(self, name: Callable[[str], str]) -> str:
        return _SETTING.sub(lambda m: name(m.group(1)), super().__str__())


class PrometheusError(CollectorError):
    """A failed API call. ``splittable``: the query engine said the query was too big (a
    timeout, too many samples, a range over a limit), so a shorter range may succeed. A hung
    server or a proxy's error is not splittable: asking again in pieces would only multiply
    the wait. ``series_bound``: the limit met counts the series the query selects, which a
    shorter range lowers only where series come and go."""

    def __init__(self, message: str, status: int | None = None, error_type: str | None = None,
                 splittable: bool = False, series_bound: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.splittable = splittable
        self.series_bound = series_bound


class UsageError(CollectorError):
    """The request itself is wrong (a bad option value, a missing URL, an unknown metric)."""


class MonitorError(CollectorError):
    """A monitor request the scheduler refused, or a scheduler without the preload."""


class MonitorUsageError(MonitorError, UsageError, ValueError):
    """A bad argument of a Monitor call (the command line's exit code 2)."""


class ArgumentError(UsageError, ValueError):
    """A bad argument of a library call, with what was given and what is accepted: a
    ``ValueError`` to Python callers, exit 2 on the command line (worded with the option)."""

    def __init__(self, name: str, value: object, problem: str, accepted: str = "") -> None:
        """``problem`` follows the value ("is longer than the range (5m)"); ``accepted``
        says what would do."""
        self.name, self.value, self.problem, self.accepted = name, value, problem, accepted
        super().__init__(f"{setting(name)} {value} {problem}"
                         + (f": {accepted}" if accepted else ""))


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
