"""The value readers every part's options share."""

from __future__ import annotations

import math

import pytest

from dask_metrics.values import finite_number, truth, whole_number


@pytest.mark.parametrize(("value", "text", "want"), [
    ("2.5", True, 2.5), (3, True, 3.0), (True, True, None), ("nan", True, None),
    (math.inf, True, None), ("x", True, None), (None, True, None), ("2.5", False, None),
    (2.5, False, 2.5), ([1], True, None),
])
def test_a_finite_number(value, text, want):
    assert finite_number(value, text=text) == want


@pytest.mark.parametrize(("value", "want"), [
    ("3", 3), (" 3 ", 3), (3.0, 3), (2.5, None), (True, None), ("3.0", 3), ("x", None),
    (None, None), ("-1", -1),
])
def test_a_whole_number(value, want):
    assert whole_number(value) == want


@pytest.mark.parametrize(("value", "want"), [
    (True, True), ("yes", True), (" ON ", True), ("1", True), (False, False), ("off", False),
    ("0", False), ("maybe", None), (2, None),
])
def test_a_truth_value(value, want):
    assert truth(value) is want
