"""Stretches without GPU samples (collector/model/holes.py), pure."""

from __future__ import annotations

import random

from dask_metrics.collector.model.holes import Holes, holes, warnings_of
from dask_metrics.collector.model.timespec import format_rfc3339

S = 1000


def test_a_stretch_longer_than_max_age_is_a_hole_edges_included():
    times = [0, 15 * S, 30 * S, 100 * S, 115 * S]
    assert holes(times, 0, 120 * S, 60 * S) == [(30 * S, 100 * S)]
    # the range's edges count: nothing sampled in its first 70 s
    assert holes(times, -70 * S, 120 * S, 60 * S) == [(-70 * S, 0), (30 * S, 100 * S)]
    assert holes(times, 0, 200 * S, 60 * S) == [(30 * S, 100 * S), (115 * S, 200 * S)]
    # at most max_age apart: none; no sample at all: not a hole (not in the export)
    assert holes(times, 0, 115 * S, 70 * S) == []
    assert holes([], 0, 100 * S, 10 * S) == []
    assert holes([500 * S], 0, 100 * S, 10 * S) == []
    # the samples around the range: an interval across an edge longer than max_age is a
    # hole from the sample before (a report's edges count nothing for it), one within not
    assert holes([-65 * S, 30 * S, 60 * S, 100 * S], 0, 90 * S, 60 * S) == [(-65 * S, 30 * S)]
    assert holes([-30 * S, 30 * S, 60 * S, 100 * S], 0, 90 * S, 60 * S) == []
    assert holes([-30 * S, 30 * S, 60 * S, 121 * S], 0, 90 * S, 60 * S) == [(60 * S, 121 * S)]


def test_holes_told_a_piece_at_a_time_are_the_holes_of_all_the_samples():
    """What an export written piece by piece finds: the same stretches, one that spans
    pieces included, and none for a worker whose samples all lie outside the range."""
    rng = random.Random(7)
    for _ in range(300):
        times = sorted(rng.sample(range(-50, 400), rng.randint(0, 40)))
        times = [t * S for t in times]
        start, end, age = rng.randint(-20, 100) * S, rng.randint(150, 380) * S, 30 * S
        found = Holes(start, end, age)
        cuts = sorted(rng.sample(range(len(times) + 1), min(3, len(times) + 1)))
        for a, b in zip([0, *cuts], [*cuts, len(times)], strict=True):
            found.add(times[a:b])
        assert found.result() == holes(times, start, end, age), (times, start, end)


def test_overlapping_holes_of_several_workers_are_one_line_naming_them():
    found = [("w-2", (100 * S, 160 * S)), ("w-1", (90 * S, 150 * S)),
             ("w-3", (400 * S, 430 * S))]
    first, second = warnings_of(found, 20 * S)
    assert first.startswith("no GPU sample of 2 worker(s) (w-1, w-2) for up to 60 s between "
                            f"{format_rfc3339(90 * S)} and {format_rfc3339(160 * S)} "
                            "(more than --max-age 20 s)")
    assert "1 worker(s) (w-3) for up to 30 s" in second
    many = [(f"w-{i:02d}", (0, 100 * S)) for i in range(8)]
    (line,) = warnings_of(many, 20 * S)
    assert "8 worker(s) (w-00, w-01, w-02, w-03, w-04, and 3 more)" in line
    assert warnings_of([], 20 * S) == []
