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


def test_a_shorter_window_asked_per_sample_matches_brute_force():
    # the window follows the scrapes: each sample asks its own, never beyond the longest
    rng = random.Random(9)
    w = WindowMax(20.0)
    history = []
    t = 0.0
    for _ in range(5000):  # long enough for the kept lists to be cut several times
        t += rng.uniform(0.05, 0.6)
        v = rng.choice([rng.uniform(0, 100), 100 - t / 100])  # falling runs fill the queue
        span = rng.uniform(0.5, 40)
        history.append((t, v))
        inside = [(s, x) for s, x in history if s >= t - min(span, 20.0)]
        expected = max(x for _, x in inside)
        last_at_max = max(s for s, x in inside if x == expected)
        assert w.add(t, v, t + 1000, span) == (expected, last_at_max + 1000)
        later = [x for s, x in inside if s > last_at_max]
        assert w.after() == ((max(later), max(s for s, x in inside if s > last_at_max
                                                and x == max(later)) + 1000)
                             if later else None)


def test_a_long_fall_is_cut_from_memory_and_stays_right():
    w = WindowMax(5.0)
    for k in range(4000):  # falling memory: every sample stays queued until it ages out
        t = k * 0.01
        span = 5.0 if k % 2 else 2.5
        oldest = next(j for j in range(max(0, k - 600), k + 1) if j * 0.01 >= t - span)
        assert w.add(t, 1e6 - k, t, span) == (1e6 - oldest, oldest * 0.01)
    assert len(w._times) < 2000  # what aged out was let go
