"""How to reach a Prometheus API: the one frozen value the command line, the environment, a
config file and Monitor's keywords all resolve to (connection), and the transport reads."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 60.0
DEFAULT_RETRIES = 3
MAX_TIMEOUT = 3600.0
"""The longest connect or read timeout accepted, in seconds (an hour)."""
MIN_DEADLINE = 30.0
DEADLINE_FACTOR = 4
"""Each try of a request, from sending it to the answer's last byte, ends within
max(MIN_DEADLINE, DEADLINE_FACTOR x the read timeout) seconds, however slowly the server
trickles its headers or body (the read timeout alone restarts with every byte)."""
MAX_RESPONSE_BYTES = 2**30
"""The largest answer read (1 GiB, decompressed), so a runaway server cannot exhaust memory;
a series of 11,000 points is about 0.3 MB of JSON: some 3,000 of them fit."""
COMPRESSIONS = ("gzip", "none")
"""``compression``: gzip (requests' default, good over a slow network) or none, which saves
the server's and our CPU time where the network is fast (loopback, a LAN)."""
READ_APIS = ("query", "remote-read", "export")
"""``read_api``: how raw samples are read. query: by range-selector queries; remote-read:
by Prometheus' remote-read API (streamed XOR chunks: a third of Prometheus' CPU, the
decoding moved into the collector), export: by VictoriaMetrics' export API, each where the
store serves it, else by queries."""


@dataclass(frozen=True)
class ConnectionSettings:
    """How to reach the API. ``url`` is the base URL, path prefix included (e.g.
    ``https://mimir.example/prometheus``); user:password in it works like ``user``/``password``.
    Secrets are left out of ``repr`` so they cannot leak through a log line or a traceback."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    ca_file: str | None = None
    cert: str | None = None
    key: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    retries: int = DEFAULT_RETRIES
    compression: str = "gzip"
    read_api: str = "query"
    total_timeout: float | None = None
    """Seconds each try may take, headers and body; None: see ``deadline``."""
    max_response_bytes: int = MAX_RESPONSE_BYTES
    """The largest answer read, decompressed; a larger one is an error."""

    def __post_init__(self) -> None:
        # Checked here too, for the Python API: NaN or inf would fail deep in the request.
        for name in ("connect_timeout", "read_timeout", "total_timeout"):
            value = getattr(self, name)
            if value is not None and not valid_timeout(value):
                raise ValueError(f"{name} must be more than 0 and at most {MAX_TIMEOUT:g} "
                                 f"seconds (got {value!r})")

    @property
    def deadline(self) -> float:
        """Seconds each try may take: ``total_timeout``, else max(MIN_DEADLINE,
        DEADLINE_FACTOR x ``read_timeout``)."""
        if self.total_timeout is not None:
            return self.total_timeout
        return max(MIN_DEADLINE, DEADLINE_FACTOR * self.read_timeout)


def valid_timeout(seconds: float) -> bool:
    """Whether ``seconds`` is a usable timeout: finite, more than 0, at most MAX_TIMEOUT."""
    return 0 < seconds <= MAX_TIMEOUT  # False for NaN too
