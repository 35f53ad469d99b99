import random

import pytest

from dask_metrics.exporter.peak import WindowMax


def test_spike_is_kept_for_the_window_then_forgotten():
    w = WindowMax(30.0)
    assert w.add(0.0, 5)[0] == 5
    assert w.add(1.0, 80)[0] == 80
    assert w.add(2.0, 6)[0] == 80
    assert w.add(30.9, 7)[0] == 80
    assert w.add(31.1, 7)[0] == 7


def test_stamp_is_the_last_time_the_maximum_was_seen():
    w = WindowMax(10.0)
    assert w.add(0.0, 5, 100.0) == (5, 100.0)
    assert w.add(1.0, 9, 101.0) == (9, 101.0)
    assert w.add(2.0, 3, 102.0) == (9, 101.0)
    assert w.add(3.0, 9, 103.0) == (9, 103.0)  # a plateau is dated by its last sample
    assert w.add(13.5, 4, 113.5) == (4, 113.5)  # the last 9 (at 3.0) left the window


def test_matches_brute_force_on_random_series():
    rng = random.Random(4)
    w = WindowMax(3.0)
    history = []
    t = 0.0
    for _ in range(2000):
        t += rng.uniform(0.05, 0.6)
        v = rng.uniform(0, 100)
        history.append((t, v))
        expected = max(x for s, x in history if s >= t - 3.0)
        last_at_max = max(s for s, x in history if s >= t - 3.0 and x == expected)
        assert w.add(t, v, t + 1000) == (expected, last_at_max + 1000)


def test_window_must_be_positive():
    with pytest.raises(ValueError):
        WindowMax(0)
