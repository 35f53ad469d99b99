"""How a question the store refuses as too big is asked again in parts, and what is learnt.

Two ways, one rule each. A range is halved (``halved``): every limit but one on series is
met by a shorter range as well as by fewer series. A label's values are asked in batches
(``in_batches``), ``label=~"v1|v2|…"`` with each value matched literally, a batch halved
where refused: a question over N series under a limit of L costs about N / L parts and a
few refusals, whatever the values look like. The values are those the caller holds (the
workers, the job ids: ``by_values``) or listed from the store when a question about every
series is refused (``LabelParts``). What a limit on series refused is kept on the client
(``SeriesLimits``): the next question about the same series is asked in parts at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from dask_metrics.collector.errors import PrometheusError
from dask_metrics.collector.query.promql import literal_matchers
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.collector.store.series_limits import Question, SeriesLimits

_T = TypeVar("_T")

MAX_SPLITS = 8  # a chunk is halved at most this often (1/256 of it) before giving up

SERIES_SPLITS = 2
"""How often a chunk refused for a limit on series is halved: a shorter range selects fewer
series only where they come and go (a fleet's DAGs over the day); where they last, halving
would only multiply the refusals."""

BATCH_CHARACTERS = 8_000
"""The most characters of values one part's matcher holds: VictoriaMetrics refuses a query
longer than 16 KB (-search.maxQueryLen), and the question holds the matcher besides."""

Halver = Callable[[int, int], tuple[tuple[int, int], ...] | None]
"""The halves of a range (lo, hi) in ms, or None where it is not halved."""

Ask = Callable[[Sequence[str]], _T]
"""A question, given the matchers that narrow it to a part (none: the whole)."""

Batch = Callable[[Sequence[str], bool], _T]
"""A question about some values, and whether it may halve its range (a value alone)."""


def whole(lo: int, hi: int) -> None:
    """The halver of a query whose range is not halved (its values are)."""


def halved(run: Callable[[int, int], list[_T]], lo: int, hi: int, halve: Halver,
           depth: int = 0) -> list[_T]:
    """``run(lo, hi)``, a range the store refuses as too big halved and asked again."""
    try:
        return run(lo, hi)
    except PrometheusError as exc:
        most = SERIES_SPLITS if exc.series_bound else MAX_SPLITS
        halves = halve(lo, hi) if exc.splittable and depth < most else None
        if not halves:
            raise
    return [x for part in halves for x in halved(run, *part, halve, depth + 1)]


def in_batches(ask: Batch[_T], values: Sequence[str], size: int,
               refused: Callable[[int], None]) -> Iterator[_T]:
    """The answers of ``ask`` for batches of at most ``size`` of ``values`` (and
    BATCH_CHARACTERS), a batch the store refuses as too big halved for the rest; a value
    alone is asked as one that may halve its range, or the store's error. ``refused(n)``:
    a batch of n values was refused for a limit on series."""
    at = 0
    while at < len(values):
        batch = _within(values, at, size)
        try:
            found = ask(batch, len(batch) == 1)
        except PrometheusError as exc:
            if not exc.splittable or len(batch) == 1:
                raise
            if exc.series_bound:
                refused(len(batch))
            size = len(batch) // 2
            continue
        at += len(batch)
        yield found


def by_values(ask: Batch[dict[str, _T]], values: Sequence[str], limits: SeriesLimits,
              question: Question) -> dict[str, _T]:
    """``ask(batch, alone)`` ({value: its part}) over ``values``, in batches as large as the
    store takes (``in_batches``), those it refused ``question`` with before halved first."""
    out: dict[str, _T] = {}
    for part in in_batches(ask, values, limits.size(question, len(values)),
                           lambda n: limits.refused(question, n)):
        out.update(part)
    return out


class LabelParts:
    """The series of a question by the values of the label ``name``, ``listed`` when it is
    first refused whole for a limit on series (once); ``learnt``: where that is kept for
    the next questions about the same series (``question``), by default this object.

    Values that the listing gives as "" (series without the label, from the series API)
    are a batch's ``""``: a literal match of the empty value selects them."""

    def __init__(self, name: str, listed: Callable[[], Iterable[str]],
                 learnt: SeriesLimits | None = None, question: str = "") -> None:
        self.name = name
        self._listed = listed
        self._values: list[str] | None = None
        self._limits = learnt or SeriesLimits()
        self._question = (name, question)

    def answers(self, ask: Ask[_T]) -> Iterator[_T]:
        """The answers of ``ask`` for every series, one part at a time (``any`` over them
        stops at the first that will do); the store's error where one value alone is over
        its limit, or where it refuses the whole but for its limit on series."""
        if not self._limits.known(self._question):
            try:
                found = ask([])
            except PrometheusError as exc:
                if not exc.series_bound:
                    raise
                self._limits.refused(self._question, len(self._values_or(exc)))
            else:
                yield found
                return
        values = self._values_or(None)
        yield from in_batches(lambda batch, _: ask(literal_matchers(self.name, batch)), values,
                              self._limits.size(self._question, len(values)),
                              lambda n: self._limits.refused(self._question, n))

    def _values_or(self, refusal: PrometheusError | None) -> list[str]:
        """The values, listed once, or the store's ``refusal`` with why it cannot be asked
        in parts."""
        if self._values is None:
            try:
                self._values = sorted(set(self._listed()))
            except PrometheusError as exc:
                if refusal is None:
                    raise
                raise PrometheusError(
                    f"{str(refusal).splitlines()[0]}; to ask it in parts, the store would not "
                    f"list the values of {self.name} either: {str(exc).splitlines()[0]}",
                    refusal.status, refusal.error_type, refusal.splittable,
                    refusal.series_bound) from None
        return self._values


def _within(values: Sequence[str], at: int, size: int) -> list[str]:
    """At most ``size`` values from ``at``, fewer where their characters would pass
    BATCH_CHARACTERS (at least one)."""
    end, length = at, 0
    while end < len(values) and end - at < size:
        length += len(values[end]) + 1
        if length > BATCH_CHARACTERS and end > at:
            break
        end += 1
    return list(values[at:end])


def listing(client: PrometheusClient, sel: str, name: str, start: int, end: int
            ) -> Callable[[], list[str]]:
    """The values of ``name`` among the series of ``sel`` in [start, end] (ms), asked of
    the store when called, and "": the labels API lists no value for the series without
    the label, which a part must select all the same."""
    return lambda: [*client.label_values(name, sel, start / 1000, end / 1000), ""]


def parts_of(client: PrometheusClient, sel: str, name: str, start: int, end: int
             ) -> LabelParts:
    """The parts of the series of ``sel`` in [start, end] (ms) by the label ``name``,
    listed from the store. What its limit refused is kept on the client for questions about
    the same series over the same range: one refused over a range may pass whole over a
    shorter one."""
    return LabelParts(name, listing(client, sel, name, start, end), client.series_limits,
                      f"{sel} [{start}, {end}]")


def joined(parts: LabelParts, ask: Ask[list[_T]]) -> list[_T]:
    """The answers of ``ask`` for every part, one list."""
    return [x for part in parts.answers(ask) for x in part]
