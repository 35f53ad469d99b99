import random

import pytest

from dask_metrics.exporter.peak import WindowMax


def test_spike_is_kept_for_the_window_then_forgotten():
    w = WindowMax(30.0)
    assert w.add(0.0, 5) == 5
    assert w.add(1.0, 80) == 80
    assert w.add(2.0, 6) == 80
    assert w.add(30.9, 7) == 80
    assert w.add(31.1, 7) == 7


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
        assert w.add(t, v) == expected


def test_window_must_be_positive():
    with pytest.raises(ValueError):
        WindowMax(0)
