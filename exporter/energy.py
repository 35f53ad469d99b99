"""The energy counter between two reads of NVML's: advanced by power x time, kept monotonic.

NVML's total-energy call costs about 4 ms of CPU per GPU on an H100 (measured with driver
580: every other call the sampler makes costs microseconds), so reading it every 0.5 s round
made it nearly all of the sidecar's sampling cost. The sampler reads it every few seconds;
in between this counter adds the power reading times the time since the previous sample (a
right Riemann sum, like busy seconds), so energy per short task stays attributable. Each
true reading re-anchors it: the counter never goes backwards (an estimate ahead of the truth
is held until the truth catches up), except when NVML's own counter went back (the driver
was reloaded), which is passed on as the counter reset Prometheus knows how to handle.
"""

from __future__ import annotations


class EnergyCounter:
    """Joules served for one GPU; ``None`` until NVML's counter has been read once."""

    def __init__(self) -> None:
        self._truth: float | None = None  # NVML's counter at its last read
        self._since_truth = 0.0  # joules estimated since then
        self._served: float | None = None
        self._last_t: float | None = None

    def gap(self) -> None:
        """The GPU or the driver was away: the time until the next sample is not credited."""
        self._last_t = None

    def update(self, now: float, power_watts: float | None, counter: float | None) -> float | None:
        """The value to serve at ``now``: ``counter`` when NVML's was read this round, else
        the last one plus the estimate from ``power_watts`` since it was read."""
        if counter is not None:
            if self._truth is not None and counter < self._truth:
                self._served = None  # NVML's counter went back: pass the reset on
            self._truth, self._since_truth = counter, 0.0
        elif self._truth is not None and power_watts is not None and self._last_t is not None:
            self._since_truth += power_watts * max(now - self._last_t, 0.0)
        self._last_t = now
        if self._truth is None:
            return None
        estimate = self._truth + self._since_truth
        self._served = estimate if self._served is None else max(self._served, estimate)
        return self._served
