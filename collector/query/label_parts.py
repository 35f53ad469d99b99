"""A question about every series, asked in parts by one label's values where a store
refuses it whole for its limit on series.

The values are listed (from the store, or given where the caller knows them) and asked in
batches, ``label=~"v1|v2|…"`` with each value matched literally, each batch halved where
refused: a question over N series under a limit of L costs about N / L parts and a few
refusals, whatever the values look like.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from dask_metrics.collector.errors import PrometheusError
from dask_metrics.collector.query.promql import literal_matchers
from dask_metrics.collector.store.client import PrometheusClient

_T = TypeVar("_T")

BATCH_CHARACTERS = 8_000
"""The most characters of values one part's matcher holds: VictoriaMetrics refuses a query
longer than 16 KB (-search.maxQueryLen), and the question holds the matcher besides."""

Ask = Callable[[Sequence[str]], _T]
"""The question, given the matchers that narrow it to a part (none: the whole)."""


class LabelParts:
    """Parts of the series by the values of the label ``name``, ``listed`` when a question
    is first refused whole (once). The batch size the store took is kept, so the next
    question about the same series is asked in parts at once, as the store would have it.

    Values that the listing gives as "" (series without the label, from the series API)
    are a batch's ``""``: a literal match of the empty value selects them."""

    def __init__(self, name: str, listed: Callable[[], Iterable[str]]) -> None:
        self.name = name
        self._listed = listed
        self._values: list[str] | None = None
        self._size = 0  # values per part; 0: the whole has not been refused yet

    def answers(self, ask: Ask[_T]) -> Iterator[_T]:
        """The answers of ``ask`` for every series, one part at a time (``any`` over them
        stops at the first that will do); the store's error where one value alone is over
        its limit, or where it refuses anything but for its limit on series."""
        if not self._size:
            try:
                found = ask([])
            except PrometheusError as exc:
                if not exc.series_bound:
                    raise
                self._values = sorted(set(self._list(exc)))
                self._size = max(1, (len(self._values) + 1) // 2)
            else:
                yield found
                return
        yield from self._batches(ask)

    def _list(self, refusal: PrometheusError) -> Iterable[str]:
        """The values, or the store's ``refusal`` with why it cannot be asked in parts."""
        try:
            return self._listed()
        except PrometheusError as exc:
            raise PrometheusError(
                f"{str(refusal).splitlines()[0]}; to ask it in parts, the store would not list "
                f"the values of {self.name} either: {str(exc).splitlines()[0]}",
                refusal.status, refusal.error_type, refusal.splittable, refusal.series_bound
            ) from None

    def _batches(self, ask: Ask[_T]) -> Iterator[_T]:
        values = self._values or []
        at = 0
        while at < len(values):
            batch = _within(values, at, self._size)
            try:
                found = ask(literal_matchers(self.name, batch))
            except PrometheusError as exc:
                if not exc.series_bound or len(batch) == 1:
                    raise
                self._size = len(batch) // 2
                continue
            at += len(batch)
            yield found


def _within(values: list[str], at: int, size: int) -> list[str]:
    """At most ``size`` values from ``at``, fewer where their characters would pass
    BATCH_CHARACTERS (at least one)."""
    end, length = at, 0
    while end < len(values) and end - at < size:
        length += len(values[end]) + 1
        if length > BATCH_CHARACTERS and end > at:
            break
        end += 1
    return values[at:end]


def listing(client: PrometheusClient, sel: str, name: str, start: int, end: int
            ) -> Callable[[], list[str]]:
    """The values of ``name`` among the series of ``sel`` in [start, end] (ms), asked of
    the store when called, and "": the labels API lists no value for the series without
    the label, which a part must select all the same."""
    return lambda: [*client.label_values(name, sel, start / 1000, end / 1000), ""]


def parts_of(client: PrometheusClient, sel: str, name: str, start: int, end: int
             ) -> LabelParts:
    """The parts of the series of ``sel`` in [start, end] (ms) by the label ``name``,
    listed from the store."""
    return LabelParts(name, listing(client, sel, name, start, end))


def joined(parts: LabelParts, ask: Ask[list[_T]]) -> list[_T]:
    """The answers of ``ask`` for every part, one list."""
    return [x for part in parts.answers(ask) for x in part]
