"""What a store's limit on series refused, learnt once for the client's session.

A limit on the series one query selects (VictoriaMetrics' -search.maxUniqueTimeseries,
Mimir's max_fetched_series_per_query, Thanos' series limit) refuses the same question again
whatever its range, where the series last: asking it whole a second time only costs a
refusal. So the fewest values of a label that a question was refused with are kept, and a
later question of as many is asked in smaller parts at once.
"""

from __future__ import annotations

Question = tuple[str, str]
"""What a limit is learnt for: the label a question is split by, and the selector of the
series it asks about (the same series, the same limit)."""


class SeriesLimits:
    """The fewest values each question was refused with for a limit on series."""

    def __init__(self) -> None:
        self._fewest: dict[Question, int] = {}

    def refused(self, question: Question, values: int) -> None:
        """The store refused ``question`` asked about ``values`` values at once."""
        self._fewest[question] = min(self._fewest.get(question, values), values)

    def known(self, question: Question) -> bool:
        """Whether ``question`` was refused before: it is then not asked whole."""
        return question in self._fewest

    def size(self, question: Question, values: int) -> int:
        """How many of ``values`` values to ask at once: halved below the fewest refused."""
        fewest = self._fewest.get(question, values + 1)
        while values > 1 and values >= fewest:
            values = (values + 1) // 2
        return values
