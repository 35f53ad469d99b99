"""docs/metrics.md is generated from the metric declarations and must match them."""

import re

from dask_metrics import contract
from dask_metrics.exporter import metricsdoc


def test_docs_match_the_code():
    assert metricsdoc.DOC.read_text() == metricsdoc.render(), (
        "docs/metrics.md is stale: run python -m dask_metrics.exporter.metricsdoc"
    )


def test_names_follow_prometheus_conventions():
    for spec in contract.SPECS:
        assert re.fullmatch(r"dask_(gpu|job)_[a-z0-9_]+", spec.name), spec.name
        assert (spec.type == "counter") == spec.name.endswith("_total"), spec.name
        if spec.unit:
            assert spec.unit in spec.name, spec.name
        assert "job" not in spec.labels and "instance" not in spec.labels
        assert spec.help.strip()
