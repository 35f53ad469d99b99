"""A small client of the Prometheus HTTP API (``/api/v1/query``, ``/query_range``), for
Prometheus and the systems that speak its API: Thanos, Mimir, VictoriaMetrics.

Every failure becomes one PrometheusError whose message is one line: what failed and what
to do. Credentials never reach a message: the URL we keep has none (user:password is moved
to basic auth), headers are never logged, and any secret a server echoes back is masked.
"""

from __future__ import annotations

import base64
import contextlib
import math
import re
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit, urlunsplit

import orjson
import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import InvalidHeader, MaxRetryError, ReadTimeoutError, ResponseError
from urllib3.util.retry import Retry

from dask_metrics import __version__
from dask_metrics.collector.errors import CollectorError, setting
from dask_metrics.collector.series import Series

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
MAX_RETRY_AFTER = 30.0
"""The longest ``Retry-After`` obeyed, in seconds; a server asking for more is reported at
once instead of waited for."""
MAX_RESPONSE_BYTES = 2**30
"""The largest answer read (1 GiB, decompressed), so a runaway server cannot exhaust memory;
a series of 11,000 points is about 0.3 MB of JSON: some 3,000 of them fit."""
_READ_CHUNK = 2**18  # 256 KiB: the fastest read here, plain or gzip (1 MiB slows gzip)
COMPRESSIONS = ("gzip", "none")
"""``compression``: gzip (requests' default, good over a slow network) or none, which saves
the server's and our CPU time where the network is fast (loopback, a LAN)."""
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
STORE_PARAMS = {"nocache": "1", "latency_offset": "0"}
"""Sent with every query so that VictoriaMetrics answers as Prometheus does (Prometheus,
Thanos and Mimir ignore them): ``nocache=1``, else its response cache rounds a query_range's
start down to a multiple of the step (grid points before --since, off since + k*step);
``latency_offset=0``, else instant queries do not see the last 30 s (-search.latencyOffset),
and a worker or a monitor session that started seconds ago is not found."""
PROMQL = "promql"  # Prometheus, Thanos, Mimir, Cortex: one query language, one behaviour
VICTORIA_METRICS = "victoriametrics"
VICTORIA_METRICS_NOTE = (
    "the store is VictoriaMetrics: samples that were NaN (a GPU reading that failed) were "
    "dropped when stored, so their cells are empty where Prometheus' would read NaN "
    "(docs/collector.md, Stores)")
_BACKOFF = 0.5


@dataclass(frozen=True)
class Store:
    """What answers the queries: ``kind`` is PROMQL or VICTORIA_METRICS."""

    kind: str
    version: str | None

    @property
    def note(self) -> str | None:
        """What an export from this store holds differently from Prometheus', if anything."""
        return VICTORIA_METRICS_NOTE if self.kind == VICTORIA_METRICS else None

_SNIPPET = 200


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


class PrometheusError(CollectorError):
    """A failed API call. ``splittable``: the query engine said the query was too big (a
    timeout, too many samples, a range over a limit), so a shorter range may succeed. A hung
    server or a proxy's error is not splittable: asking again in pieces would only multiply
    the wait."""

    def __init__(self, message: str, status: int | None = None, error_type: str | None = None,
                 splittable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.splittable = splittable


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """(URL without user:password and trailing slash, user, password).

    Raises ValueError for a URL that is not http(s) or carries a query or fragment.
    """
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{redact_url(url)!r} is not an http(s) URL")
    if parts.query or parts.fragment:
        raise ValueError(f"{redact_url(url)!r}: give the base URL, without '?' or '#'")
    host = parts.netloc.rpartition("@")[2]
    clean = urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return clean, user, password


def redact_url(url: str) -> str:
    """The URL with any user:password removed, for messages and files."""
    return re.sub(r"(?<=://)[^/@]*@", "", url)


_RETRY_AFTER = Retry(0)
_RETRY_AFTER.retry_after_max = math.inf  # newer urllib3 cap it at 6 h: say what was asked


def asked_wait(headers: Mapping[str, str]) -> float | None:
    """The seconds a ``Retry-After`` header asks for (a number or an HTTP date), or None
    when there is none or it cannot be read (then the usual backoff applies)."""
    value = headers.get("Retry-After")
    try:
        return None if value is None else _RETRY_AFTER.parse_retry_after(value)
    except InvalidHeader:
        return None


class _Retry(Retry):
    """Retry connection errors, 429 and 5xx, except a JSON 503 or 422: that is the query
    engine itself giving up (a timeout, too many samples), and the same query would only fail
    again after a long wait; the caller splits the range instead. A ``Retry-After`` over
    MAX_RETRY_AFTER ends the retries too: urllib3 would sleep that long, silently."""

    def increment(self, method: str | None = None, url: str | None = None, *args: Any,
                  **kwargs: Any) -> Retry:
        response = kwargs.get("response")
        if response is not None and (
                (response.status in (422, 503)
                 and "json" in response.headers.get("Content-Type", ""))
                or (asked_wait(response.headers) or 0) > MAX_RETRY_AFTER):
            # With raise_on_status=False, urllib3 hands this response back as the answer.
            raise MaxRetryError(kwargs.get("_pool"), url or "",
                                ResponseError("no (further) retry"))
        return super().increment(method, url, *args, **kwargs)

    def get_retry_after(self, response: Any) -> float | None:
        return asked_wait(response.headers)


class _Deadline:
    """The watchdog of one request: each try (armed when its headers are awaited) must end
    within ``seconds``, else its socket is shut down, which wakes the blocked read. The
    read timeout cannot do this: it restarts with every byte a slow server trickles."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._timer: threading.Timer | None = None

    def arm(self, sock: socket.socket) -> None:
        """Start the clock for a new try on ``sock``, stopping the previous try's."""
        self.cancel()
        self.expired = False
        self._timer = threading.Timer(self.seconds, self._expire, (sock,))
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _expire(self, sock: socket.socket) -> None:
        self.expired = True
        # socket.socket's own shutdown, also for TLS: SSLSocket's would drop the TLS state
        # under the reading thread's feet.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


_DEADLINE: ContextVar[_Deadline | None] = ContextVar("prometheus_request_deadline",
                                                     default=None)


class _WatchedConnection:
    """A urllib3 connection that arms the current request's deadline when it waits for an
    answer: the one place every try, first or retried, passes with its socket."""

    sock: socket.socket | None

    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        deadline = _DEADLINE.get()
        if deadline is not None and self.sock is not None:
            deadline.arm(self.sock)
        return super().getresponse(*args, **kwargs)  # type: ignore[misc]


class _HTTPConnection(_WatchedConnection, HTTPConnection):
    pass


class _HTTPSConnection(_WatchedConnection, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


_WATCHED_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class _Adapter(HTTPAdapter):
    """requests' adapter with watched connections, direct or through an HTTP(S) proxy (a
    SOCKS proxy keeps its own pools, and only the body's reading is bounded there)."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _WATCHED_POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if not proxy.lower().startswith("socks"):  # as requests tells them apart
            manager.pool_classes_by_scheme = _WATCHED_POOLS
        return manager


@dataclass(frozen=True)
class _Answer:
    """A response read whole (within the limits): what the decoding needs of it."""

    status: int
    reason: str
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def secret_forms(secret: str) -> set[str]:
    """Every way a server may echo ``secret`` back: as given, percent-encoded, and base64
    (standard and URL-safe, with and without padding), as in a Basic Authorization header."""
    forms = {secret, quote(secret, safe=""), quote_plus(secret)}
    raws = {secret.encode()}
    with contextlib.suppress(UnicodeEncodeError):
        raws.add(secret.encode("latin-1"))  # how requests encodes Basic credentials
    for raw in raws:
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(raw).decode()
            forms |= {encoded, encoded.rstrip("=")}
    return {f for f in forms if f}


def _size(count: int) -> str:
    """``1 GiB``, ``512 MiB``, ``1.5 KiB``: a byte count for a message."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:g} {unit}"
    return f"{count} bytes"


def _one_line(text: str, limit: int = _SNIPPET) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and everything it wraps: causes, contexts, urllib3's reasons, arguments."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or current in seen:
            continue
        seen.append(current)
        linked = [current.__cause__, current.__context__, getattr(current, "reason", None),
                  *current.args]  # ssl's reason is a string; args hold anything
        todo += [e for e in linked if isinstance(e, BaseException)]
    return seen


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    return any(isinstance(c, kind) for c in _causes(exc))


def _reason(exc: BaseException) -> str:
    """The root cause of a requests/urllib3 exception, e.g. "connection refused"."""
    seen = _causes(exc)
    for current in seen:
        if isinstance(current, OSError) and current.strerror:
            text = current.strerror  # "Connection refused" reads "connection refused" inline
            return text[0].lower() + text[1:] if text[1:2].islower() else text
    return re.sub(r"<[^>]*>:? ?", "", _one_line(str(seen[-1]))) or type(exc).__name__


class _Milliseconds(dict[Any, int]):
    """Prometheus' timestamps (JSON numbers, seconds) as integer milliseconds, each converted
    once: the series of one answer share their scrape times."""

    def __missing__(self, seconds: Any) -> int:
        ms = self[seconds] = round(float(seconds) * 1000)
        return ms


class _Floats(dict[str, float]):
    """Prometheus' sample values (JSON strings) as floats, each distinct one parsed once:
    values repeat (totals, temperatures, percents), and a hit costs less than a parse. Equal
    strings parse alike, so the result is exactly float()'s."""

    def __missing__(self, text: str) -> float:
        value = self[text] = float(text)
        return value


class PrometheusClient:
    """Instant and range queries over POST (long PromQL fits, nothing lands in access logs).

    ``on_warning`` receives each distinct warning or info a response carries (Thanos partial
    responses, Prometheus annotations); they are also kept in ``warnings``.
    """

    def __init__(self, settings: ConnectionSettings,
                 on_warning: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.url, url_user, url_password = split_credentials(settings.url)
        self.warnings: list[str] = []
        self._on_warning = on_warning
        user = settings.user if settings.user is not None else url_user
        password = settings.password if settings.password is not None else url_password
        secrets = [s for s in (password, settings.bearer_token) if s]
        secrets += [v for _, v in settings.headers if v]
        if user is not None and password:
            secrets.append(f"{user}:{password}")  # what Basic auth encodes
        # Longest first, so a secret that contains another is masked whole; any case, as
        # servers may echo headers lower-cased.
        forms = sorted({f for s in secrets for f in secret_forms(s)}, key=len, reverse=True)
        self._secrets = re.compile("|".join(map(re.escape, forms)), re.IGNORECASE) if forms \
            else None

        session = requests.Session()
        retry = _Retry(total=settings.retries, connect=settings.retries, read=settings.retries,
                       status=settings.retries, backoff_factor=_BACKOFF,
                       status_forcelist=RETRY_STATUSES, allowed_methods={"GET", "POST"},
                       raise_on_status=False, respect_retry_after_header=True)
        adapter = _Adapter(max_retries=retry)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers["User-Agent"] = f"dask-metrics-collector/{__version__}"
        if user is not None:
            session.auth = (user, password or "")
        if settings.bearer_token:
            session.headers["Authorization"] = f"Bearer {settings.bearer_token}"
        if settings.compression == "none":
            session.headers["Accept-Encoding"] = "identity"
        session.headers.update(dict(settings.headers))
        self._session = session
        # Given with each request: a Session's own verify loses to REQUESTS_CA_BUNDLE.
        self._verify = settings.ca_file or None
        self._cert = (settings.cert, settings.key) if settings.key else settings.cert

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ---- queries ---------------------------------------------------------------------------

    def query(self, expr: str, at: float) -> list[Series]:
        """An instant query at unix time ``at``: a vector, or raw samples for ``metric[5m]``."""
        data = self._api("query", {"query": expr, "time": f"{at:.3f}", **STORE_PARAMS}, expr)
        return self._series(data, expr)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """A range query on the grid start + k*step (at most 11,000 points per series)."""
        form = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}",
                **STORE_PARAMS}
        return self._series(self._api("query_range", form, expr), expr)

    def build_version(self) -> str | None:
        """The server's version, when it tells (Mimir and VictoriaMetrics may not)."""
        try:
            data = self._decode(self._request("GET", "status/buildinfo"), "status/buildinfo")
        except PrometheusError:
            return None
        return str(data.get("version")) if isinstance(data, dict) and data.get("version") else None

    def store(self) -> Store:
        """Which kind of store answers, and its version. PromQL servers (Prometheus, Thanos,
        Mimir) report a version; VictoriaMetrics does not, and is told apart by MetricsQL's
        ``now()``, which PromQL refuses: one small instant query, only when no version came
        back."""
        version = self.build_version()
        if version is None:
            try:
                self._api("query", {"query": "now()", **STORE_PARAMS}, "now()")
            except PrometheusError:
                pass
            else:
                return Store(VICTORIA_METRICS, None)
        return Store(PROMQL, version)

    # ---- plumbing --------------------------------------------------------------------------

    def _api(self, path: str, form: dict[str, str], expr: str) -> Any:
        # Ask the server to stop a little before we would, so a slow query ends in its clear
        # "timeout" answer (which the caller can split) rather than a dropped connection.
        form["timeout"] = f"{max(round(self.settings.read_timeout * 900), 100)}ms"
        return self._decode(self._request("POST", path, form), f"the query {expr}")

    def _request(self, method: str, path: str, form: Mapping[str, str] | None = None
                 ) -> _Answer:
        """One API call, retries included, read whole: each try within the deadline, the
        answer within max_response_bytes."""
        s = self.settings
        deadline = _Deadline(s.deadline)
        token = _DEADLINE.set(deadline)
        try:
            with self._session.request(method, f"{self.url}/api/v1/{path}", data=form,
                                       timeout=(s.connect_timeout, s.read_timeout),
                                       verify=self._verify, cert=self._cert,
                                       stream=True) as resp:
                content = b"".join(self._chunks(resp))
            if deadline.expired:  # a body read to the end of a shut-down connection
                raise self._error(self._too_long())
            return _Answer(resp.status_code, resp.reason or "", resp.headers, content)
        except (requests.exceptions.RequestException, OSError) as exc:
            raise self._error(self._too_long() if deadline.expired else self._failure(exc)
                              ) from None
        finally:
            deadline.cancel()
            _DEADLINE.reset(token)

    def _chunks(self, resp: requests.Response) -> Iterator[bytes]:
        """The body in large pieces (joined and decoded once by the caller: the fast path),
        stopping at max_response_bytes."""
        limit, size = self.settings.max_response_bytes, 0
        for chunk in resp.iter_content(_READ_CHUNK):
            size += len(chunk)
            if size > limit:
                raise self._error(f"Prometheus at {self.url} answered more than "
                                  f"{_size(limit)}, the most the collector reads: lower "
                                  f"{setting('chunk')}, or select fewer {setting('workers')}")
            yield chunk

    def _failure(self, exc: BaseException) -> str:
        """The message for a request that failed in requests or urllib3."""
        s = self.settings
        if isinstance(exc, requests.exceptions.SSLError):
            return (f"TLS with {self.url} failed ({_reason(exc)}): check {setting('ca_file')}, "
                    f"{setting('cert')} and {setting('key')}")
        if isinstance(exc, requests.exceptions.ConnectTimeout):
            return (f"cannot reach Prometheus at {self.url}: no connection within "
                    f"{s.connect_timeout:g} s; check {setting('url')} and the network")
        if isinstance(exc, requests.exceptions.ReadTimeout) or (
                isinstance(exc, requests.exceptions.ConnectionError)
                and _caused_by(exc, ReadTimeoutError)):  # read retries spent: requests says so
            return self._too_slow()
        if isinstance(exc, requests.exceptions.ConnectionError):
            return (f"cannot reach Prometheus at {self.url} ({_reason(exc)}): is it running, "
                    f"and is {setting('url')} right?")
        return f"request to Prometheus at {self.url} failed: {_reason(exc)}"

    def _too_slow(self) -> str:
        s = self.settings
        tries = f" ({s.retries} retries)" if s.retries else ""
        return (f"Prometheus at {self.url} did not answer within {s.read_timeout:g} s{tries}: "
                f"raise {setting('read_timeout')}, or lower {setting('chunk')}")

    def _too_long(self) -> str:
        return (f"Prometheus at {self.url} did not finish its answer within "
                f"{self.settings.deadline:g} s, although it kept sending: "
                f"raise {setting('read_timeout')} (each try may take max({MIN_DEADLINE:g} s, "
                f"{DEADLINE_FACTOR} x it)), or lower {setting('chunk')}")

    def _decode(self, resp: _Answer, what: str) -> Any:
        status = resp.status
        try:
            body = orjson.loads(resp.content)  # about 2.5x json's speed on a matrix
        except ValueError:
            body = None
        reason = f"HTTP {status} {resp.reason or ''}".rstrip()
        if status in (401, 403):
            raise self._error(
                f"Prometheus at {self.url} refused the credentials ({reason}: "
                f"{self._snippet(resp.text, 80)}): check {setting('user')}/{setting('password')}, "
                f"{setting('bearer_token')}, or a tenant header such as X-Scope-OrgID", status)
        if isinstance(body, dict) and body.get("status") == "error":
            error_type, error = str(body.get("errorType", "")), str(body.get("error", ""))
            text = error.lower()
            splittable = status in (422, 503) and (
                error_type == "timeout" or any(w in text for w in (
                    "too many", "timeout", "timed out", "exceed",
                    "cannot select more than")))  # VictoriaMetrics' -search.maxSamplesPerQuery
            raise self._error(f"Prometheus rejected {_one_line(what)} ({error_type}: "
                              f"{self._snippet(error)})", status, error_type, splittable)
        if status == 404 or (status == 400 and ("unsupported path" in resp.text
                                                or "pathPrefix" in resp.text)):
            # VictoriaMetrics answers 400 outside its prefix: "unsupported path requested",
            # or "missing -http.pathPrefix=... in the requested path" when it has one
            raise self._error(f"{self.url}/api/v1/... not found ({reason}): give {setting('url')} "
                              "the API's base URL, with its path prefix if it has one "
                              "(e.g. http://host/prometheus)", status)
        if status in RETRY_STATUSES:
            wait = asked_wait(resp.headers)
            if wait is not None and wait > MAX_RETRY_AFTER:  # the retries stopped at once
                raise self._error(f"Prometheus at {self.url} answered {reason} and asked to be "
                                  f"retried after {wait:g} s (Retry-After), longer than the "
                                  f"{MAX_RETRY_AFTER:g} s the collector waits: try again "
                                  "later", status)
            raise self._error(f"Prometheus at {self.url} failed with {reason} after "
                              f"{self.settings.retries} retries ({self._snippet(resp.text, 120)}): "
                              f"try again later, or lower {setting('chunk')}", status)
        if not isinstance(body, dict) or status != 200:
            kind = resp.headers.get("Content-Type", "no content type")
            raise self._error(f"Prometheus at {self.url} answered {reason} with {kind}, not the "
                              f"API's JSON ({self._snippet(resp.text, 80)!r}): is "
                              f"{setting('url')} the API's base URL, not a UI or a login page?",
                              status)
        for note in list(body.get("warnings") or []) + list(body.get("infos") or []):
            self.warn(f"Prometheus: {self._snippet(str(note))} (in {_one_line(what, 120)})")
        if body.get("status") != "success":
            raise self._error(f"Prometheus at {self.url} answered status "
                              f"{body.get('status')!r} for {_one_line(what)}", status)
        return body.get("data")

    def _series(self, data: Any, expr: str) -> list[Series]:
        """Matrix, vector or scalar results as Series with millisecond timestamps."""
        try:
            kind, result = data["resultType"], data["result"]
            if kind == "scalar":
                result = [{"metric": {}, "value": result}]
            out = []
            ms, floats = _Milliseconds(), _Floats()
            last_stamps: tuple[Any, ...] | None = None
            times: list[int] = []
            for item in result:
                points = item["values"] if "values" in item else [item["value"]]
                stamps, values = zip(*points, strict=True) if points else ((), ())
                if stamps != last_stamps:  # usually the previous series' scrape times
                    last_stamps, times = stamps, list(map(ms.__getitem__, stamps))
                out.append(Series(dict(item.get("metric", {})), times.copy(),
                                  list(map(floats.__getitem__, values))))
            return out
        except (KeyError, TypeError, ValueError) as exc:
            raise self._error(f"Prometheus at {self.url} answered an unexpected result for "
                              f"{_one_line(expr)} ({type(exc).__name__}: {exc})") from None

    def warn(self, message: str) -> None:
        """Keep ``message`` among the warnings (once) and hand it to ``on_warning``: a
        response's, or the caller's about the data."""
        message = self._scrub(message)
        if message in self.warnings:
            return
        self.warnings.append(message)
        if self._on_warning:
            self._on_warning(message)

    def _snippet(self, text: str, limit: int = _SNIPPET) -> str:
        """A server's text for a message: secrets masked before it is cut short, so no part
        of one is left at the cut."""
        return _one_line(self._scrub(text), limit)

    def _scrub(self, text: str) -> str:
        if self._secrets is not None:
            text = self._secrets.sub("***", text)
        return redact_url(text)

    def _error(self, message: str, status: int | None = None, error_type: str | None = None,
               splittable: bool = False) -> PrometheusError:
        return PrometheusError(self._scrub(message), status, error_type, splittable)
