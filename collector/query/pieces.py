"""A long range read, joined and written a piece at a time (pure): an export of a day holds
one piece of a batch of workers in memory, not the day, and its files and figures are those
of the whole range at once (each piece is what an export of it alone reads, and the
figures that cross a piece's edges are carried over or cut there)."""

from __future__ import annotations

from typing import NamedTuple

from dask_metrics.collector.model.series import CHUNK_SLACK


class Piece(NamedTuple):
    """Rows [lo, hi] (ms) of a range; the part of the range its intervals are credited to
    (``window``: edges shared with its neighbours, an interval across one cut there); how
    far past ``hi`` what ran on the workers is read (``until``: the range's ``hi`` in the
    last piece, as for the whole range; in the others a ``reach`` past the window, where
    the intervals across its end end, so that the mix of such an interval is the whole
    range's: that of its end or of the next change of DAG)."""

    lo: int
    hi: int
    until: int
    window: tuple[int, int]


def pieces(lo: int, hi: int, start: int, end: int, length: int, reach: int,
           step: int | None = None) -> list[Piece]:
    """[lo, hi], the data of the range [start, end], cut at lo + k * ``length`` (a whole
    number of ``step``s with a grid starting at lo, so that every piece starts on it); a last
    piece no longer than 1/CHUNK_SLACK of ``length`` rides with the one before, as a query's
    last chunk does. One piece, the whole range, when it is no longer than ``length``."""
    if step:
        length = max(length // step, 1) * step
    edges = [*range(lo, hi + 1, length)][1:]
    if edges and (hi + 1 - edges[-1]) * CHUNK_SLACK <= length:
        del edges[-1]
    starts = [lo, *edges]
    ends = [*edges, hi + 1]
    return [Piece(a, b - 1, b + reach if k < len(edges) else hi,
                  (start if k == 0 else a, b if k < len(edges) else end))
            for k, (a, b) in enumerate(zip(starts, ends, strict=True))]
