"""A small client of the Prometheus HTTP API (``/api/v1/query``, ``/query_range``), for
Prometheus and the systems that speak its API: Thanos, Mimir, VictoriaMetrics.

Every failure becomes one PrometheusError whose message is one line: what failed and what
to do. Credentials never reach a message: the URL we keep has none (user:password is moved
to basic auth), headers are never logged, and any secret a server echoes back is masked.
"""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit, urlunsplit

import orjson
import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError, ReadTimeoutError, ResponseError
from urllib3.util.retry import Retry

from dask_metrics import __version__
from dask_metrics.collector.errors import CollectorError
from dask_metrics.collector.series import Series

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 60.0
DEFAULT_RETRIES = 3
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


class _Retry(Retry):
    """Retry connection errors, 429 and 5xx, except a JSON 503 or 422: that is the query
    engine itself giving up (a timeout, too many samples), and the same query would only fail
    again after a long wait; the caller splits the range instead."""

    def increment(self, method: str | None = None, url: str | None = None, *args: Any,
                  **kwargs: Any) -> Retry:
        response = kwargs.get("response")
        if (response is not None and response.status in (422, 503)
                and "json" in response.headers.get("Content-Type", "")):
            raise MaxRetryError(kwargs.get("_pool"), url or "",
                                ResponseError("the query engine gave up"))
        return super().increment(method, url, *args, **kwargs)


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
        # Longest first, so a secret that contains another is masked whole.
        self._secrets = sorted({f for s in secrets for f in secret_forms(s)}, key=len,
                               reverse=True)

        session = requests.Session()
        retry = _Retry(total=settings.retries, connect=settings.retries, read=settings.retries,
                       status=settings.retries, backoff_factor=_BACKOFF,
                       status_forcelist=RETRY_STATUSES, allowed_methods={"GET", "POST"},
                       raise_on_status=False, respect_retry_after_header=True)
        adapter = HTTPAdapter(max_retries=retry)
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
                 ) -> requests.Response:
        s = self.settings
        try:
            return self._session.request(method, f"{self.url}/api/v1/{path}", data=form,
                                         timeout=(s.connect_timeout, s.read_timeout),
                                         verify=self._verify, cert=self._cert)
        except requests.exceptions.SSLError as exc:
            raise self._error(f"TLS with {self.url} failed ({_reason(exc)}): check --ca-file, "
                              "--cert and --key") from None
        except requests.exceptions.ConnectTimeout:
            raise self._error(f"cannot reach Prometheus at {self.url}: no connection within "
                              f"{s.connect_timeout:g} s; check --prometheus and the network"
                              ) from None
        except requests.exceptions.ReadTimeout:
            raise self._error(self._too_slow()) from None
        except requests.exceptions.ConnectionError as exc:
            if _caused_by(exc, ReadTimeoutError):  # read retries spent: requests says so
                raise self._error(self._too_slow()) from None
            raise self._error(f"cannot reach Prometheus at {self.url} ({_reason(exc)}): is it "
                              "running, and is --prometheus right?") from None
        except (requests.exceptions.RequestException, OSError) as exc:
            raise self._error(f"request to Prometheus at {self.url} failed: {_reason(exc)}"
                              ) from None

    def _too_slow(self) -> str:
        s = self.settings
        tries = f" ({s.retries} retries)" if s.retries else ""
        return (f"Prometheus at {self.url} did not answer within {s.read_timeout:g} s{tries}: "
                "raise --timeout, or lower --chunk")

    def _decode(self, resp: requests.Response, what: str) -> Any:
        status = resp.status_code
        try:
            body = orjson.loads(resp.content)  # about 2.5x json's speed on a matrix
        except ValueError:
            body = None
        reason = f"HTTP {status} {resp.reason or ''}".rstrip()
        if status in (401, 403):
            raise self._error(
                f"Prometheus at {self.url} refused the credentials ({reason}: "
                f"{self._snippet(resp.text, 80)}): check --user/--password-file, "
                "--bearer-token-file, or a tenant header such as X-Scope-OrgID", status)
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
            raise self._error(f"{self.url}/api/v1/... not found ({reason}): give --prometheus "
                              "the API's base URL, with its path prefix if it has one "
                              "(e.g. http://host/prometheus)", status)
        if status in RETRY_STATUSES:
            raise self._error(f"Prometheus at {self.url} failed with {reason} after "
                              f"{self.settings.retries} retries ({self._snippet(resp.text, 120)}): "
                              "try again later, or lower --chunk", status)
        if not isinstance(body, dict) or status != 200:
            kind = resp.headers.get("Content-Type", "no content type")
            raise self._error(f"Prometheus at {self.url} answered {reason} with {kind}, not the "
                              f"API's JSON ({self._snippet(resp.text, 80)!r}): is --prometheus the "
                              "API's base URL, not a UI or a login page?", status)
        for note in list(body.get("warnings") or []) + list(body.get("infos") or []):
            self._warn(f"Prometheus: {self._snippet(str(note))} (in {_one_line(what, 120)})")
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

    def _warn(self, message: str) -> None:
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
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return redact_url(text)

    def _error(self, message: str, status: int | None = None, error_type: str | None = None,
               splittable: bool = False) -> PrometheusError:
        return PrometheusError(self._scrub(message), status, error_type, splittable)
