"""Who scrapes ``/metrics`` and how far apart: what a peak window must cover.

A peak gauge is exact only if its window reaches back to the same scraper's previous scrape;
Prometheus scrapes every 15-60 s, and two replicas scrape independently, so the window
follows each client's own gaps rather than a fixed length.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

MAX_CLIENTS = 64  # a scan from many addresses forgets the oldest, never grows memory
RECENT_GAPS = 4  # a scraper's longest gap of its last few: an interval change ages out


class _Client:
    __slots__ = ("gaps", "last")

    def __init__(self, now: float) -> None:
        self.last = now
        self.gaps: deque[float] = deque(maxlen=RECENT_GAPS)


class ScrapeLog:
    """When each client (by address) last scraped, and the gaps between its recent scrapes.

    Thread-safe: HTTP threads record scrapes while the sampler asks ``longest_gap``.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: OrderedDict[str, _Client] = OrderedDict()

    def scraped(self, client: str) -> None:
        """Note a scrape of ``/metrics`` by ``client`` now."""
        now = self._clock()
        with self._lock:
            known = self._clients.get(client)
            if known is None:
                self._clients[client] = _Client(now)
                if len(self._clients) > MAX_CLIENTS:
                    self._clients.popitem(last=False)
                return
            known.gaps.append(now - known.last)
            known.last = now
            self._clients.move_to_end(client)

    def longest_gap(self, horizon: float) -> float:
        """Seconds: over the clients that scraped within ``horizon``, the longest of the
        time since each one's last scrape and its recent gaps (0.0: none did). The time since
        the last scrape counts too, so the next scrape is covered before its gap is seen,
        and after an outage the first scrape reports the peak of all of it."""
        now = self._clock()
        longest = 0.0
        with self._lock:
            for known in self._clients.values():
                since = now - known.last
                if since <= horizon:
                    longest = max(longest, since, *known.gaps)
        return longest
