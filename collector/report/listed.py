"""The few best of many, in the order they came (pure): how the report lists GPUs of a fleet
without holding them all."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Generic, TypeVar

LISTED = 16
"""GPUs listed per job and DAG (peaks, use per GPU) and GPUs near capacity: two full
8-GPU nodes, and the page's tables stay readable; report.json says how many are left out."""

T = TypeVar("T")


class Listed(Generic[T]):
    """The ``most`` best of what is offered (by ``rank``, larger first; the earlier on a
    tie), in the order offered, and how many were offered."""

    __slots__ = ("_heap", "most", "offered")

    def __init__(self, most: int = LISTED) -> None:
        self.most, self.offered = most, 0
        self._heap: list[tuple[tuple[float, ...], int, T]] = []

    def offer(self, rank: tuple[float, ...], item: T) -> None:
        entry = (rank, -self.offered, item)  # the order offered breaks ties: never the item
        self.offered += 1
        if len(self._heap) < self.most:
            heapq.heappush(self._heap, entry)
        else:
            heapq.heappushpop(self._heap, entry)

    def __iter__(self) -> Iterator[T]:
        return (item for _, _, item in sorted(self._heap, key=lambda e: -e[1]))

    @property
    def omitted(self) -> int:
        return self.offered - len(self._heap)
