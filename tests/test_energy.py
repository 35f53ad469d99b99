"""The energy counter between NVML reads: estimate, re-anchor, reset, gaps (pure)."""

from dask_metrics.exporter.energy import EnergyCounter


def test_nothing_is_served_before_nvml_counter_was_read():
    counter = EnergyCounter()
    assert counter.update(0.0, 300.0, None) is None  # a GPU without an energy counter
    assert counter.update(1.0, 300.0, None) is None


def test_estimate_follows_power_and_is_re_anchored_on_each_read():
    counter = EnergyCounter()
    assert counter.update(0.0, 100.0, 500.0) == 500.0
    assert counter.update(1.0, 100.0, None) == 600.0
    assert counter.update(2.0, 300.0, None) == 900.0  # right Riemann sum: power at the sample
    assert counter.update(3.0, 300.0, 1150.0) == 1150.0  # the truth was ahead: taken
    assert counter.update(4.0, None, None) == 1150.0  # no power reading: held


def test_never_goes_backwards_unless_nvml_counter_did():
    counter = EnergyCounter()
    counter.update(0.0, 100.0, 500.0)
    assert counter.update(10.0, 100.0, None) == 1500.0
    assert counter.update(20.0, 100.0, 1400.0) == 1500.0  # estimate ahead: held
    assert counter.update(21.0, 100.0, None) == 1500.0  # 1400 + 100 not yet past it
    assert counter.update(22.0, 100.0, None) == 1600.0
    assert counter.update(23.0, 100.0, 20.0) == 20.0  # driver reloaded: a counter reset


def test_a_gap_is_not_credited():
    counter = EnergyCounter()
    counter.update(0.0, 100.0, 500.0)
    counter.gap()
    assert counter.update(60.0, 100.0, None) == 500.0
    assert counter.update(61.0, 100.0, None) == 600.0
