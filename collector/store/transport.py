"""The HTTP transport of the Prometheus client: one request, retried and bounded.

Retries (connection errors, 429 and 5xx, with backoff and Retry-After), a deadline per try
that a trickling server cannot stretch (a watchdog on the socket), a cap on the answer's
size, TLS and proxies: requests' session and urllib3's pools, adapted. What the answer
means is the client's business (``client``); every failure here is one PrometheusError whose
message says what failed and which setting to change.
"""

from __future__ import annotations

import contextlib
import math
import re
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import InvalidHeader, MaxRetryError, ReadTimeoutError, ResponseError
from urllib3.util.retry import Retry

from dask_metrics import __version__
from dask_metrics.collector.errors import PrometheusError, setting
from dask_metrics.collector.store.redaction import one_line, split_credentials
from dask_metrics.collector.store.settings import (
    DEADLINE_FACTOR,
    MIN_DEADLINE,
    ConnectionSettings,
)

MAX_RETRY_AFTER = 30.0
"""The longest ``Retry-After`` obeyed, in seconds; a server asking for more is reported at
once instead of waited for."""
_READ_CHUNK = 2**18  # 256 KiB: the fastest read here, plain or gzip (1 MiB slows gzip)
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_BACKOFF = 0.5
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
class Answer:
    """A response read whole (within the limits): what the decoding needs of it."""

    status: int
    reason: str
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def _size(count: int) -> str:
    """``1 GiB``, ``512 MiB``, ``1.5 KiB``: a byte count for a message."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:g} {unit}"
    return f"{count} bytes"


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
    return re.sub(r"<[^>]*>:? ?", "", one_line(str(seen[-1]))) or type(exc).__name__


class Transport:
    """One connection's session: ``request`` sends an API call to ``url``/api/v1/... with
    the settings' retries, timeouts, deadline, size cap, TLS and credentials. ``scrub``
    masks the connection's secrets in every message it raises."""

    def __init__(self, settings: ConnectionSettings, scrub: Callable[[str], str]) -> None:
        self.settings = settings
        self.url, url_user, url_password = split_credentials(settings.url)
        self._scrub = scrub
        user = settings.user if settings.user is not None else url_user
        password = settings.password if settings.password is not None else url_password
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
        self.session = session
        # Given with each request: a Session's own verify loses to REQUESTS_CA_BUNDLE.
        self._verify = settings.ca_file or None
        self._cert = (settings.cert, settings.key) if settings.key else settings.cert

    def close(self) -> None:
        self.session.close()

    def request(self, method: str, path: str, form: Mapping[str, str] | bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Answer:
        """One API call, retries included, read whole: each try within the deadline, the
        answer within max_response_bytes. ``form``: form fields, or a body as it is."""
        s = self.settings
        deadline = _Deadline(s.deadline)
        token = _DEADLINE.set(deadline)
        try:
            with self.session.request(method, f"{self.url}/api/v1/{path}", data=form,
                                       headers=headers,
                                       timeout=(s.connect_timeout, s.read_timeout),
                                       verify=self._verify, cert=self._cert,
                                       stream=True) as resp:
                content = b"".join(self._chunks(resp))
            if deadline.expired:  # a body read to the end of a shut-down connection
                raise self.error(self._too_long())
            return Answer(resp.status_code, resp.reason or "", resp.headers, content)
        except (requests.exceptions.RequestException, OSError) as exc:
            raise self.error(self._too_long() if deadline.expired else self._failure(exc)
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
                raise self.error(f"Prometheus at {self.url} answered more than "
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

    def error(self, message: str, status: int | None = None, error_type: str | None = None,
              splittable: bool = False, series_bound: bool = False) -> PrometheusError:
        return PrometheusError(self._scrub(message), status, error_type, splittable,
                               series_bound)
