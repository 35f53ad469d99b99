"""Exposition of metric families, byte for byte what prometheus_client writes in the format
a scraper negotiates, but with each label set escaped once.

prometheus_client validates and escapes every label name of every sample on every scrape
(about 20 µs a sample); a GPU's label sets are the same on every scrape, so caching their
text makes a scrape several times cheaper (docs/benchmarks.md). The HELP/TYPE lines and
everything else still come from prometheus_client. Only what the GPU collector produces is
encoded here: gauges and counters without timestamps, exemplars or units, whose sample lines
are the same in the text and OpenMetrics formats; tests/test_exposition.py holds the output
to prometheus_client's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

Encoder = Callable[[Collector], bytes]
EOF_LINE = b"# EOF\n"


class _Families(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


_headers: dict[tuple[str, str, str, str], bytes] = {}


def _header(family: Metric, encoder: Encoder, content_type: str) -> bytes:
    """HELP and TYPE lines of a family, as the encoder writes them (computed once)."""
    key = (content_type, family.name, family.type, family.documentation)
    text = _headers.get(key)
    if text is None:
        empty = Metric(family.name, family.documentation, family.type)
        text = _headers[key] = encoder(_Families([empty])).removesuffix(EOF_LINE)
    return text


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


@lru_cache(maxsize=16384)
def _labels(items: tuple[tuple[str, str], ...]) -> str:
    if not items:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in items) + "}"


def _line(sample: Sample) -> str:
    labels = _labels(tuple(sorted(sample.labels.items())))
    return f"{sample.name}{labels} {floatToGoString(sample.value)}\n"


def render(families: Iterable[Metric], rest: Collector, encoder: Encoder,
           content_type: str) -> bytes:
    """``families`` encoded here, then ``rest`` by prometheus_client, in one document."""
    parts = [_header(f, encoder, content_type) + "".join(map(_line, f.samples)).encode()
             for f in families]
    tail = encoder(rest)
    return b"".join(parts) + tail
