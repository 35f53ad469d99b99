"""Connection settings from the command line, the environment and a YAML config file.

The command line wins, then ``DASK_METRICS_PROMETHEUS_URL``, then the file. Secrets come
from files (``--password-file``, ``--bearer-token-file``) or the URL, never from an option
value that ``ps`` would show.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dask_metrics.collector.errors import UsageError
from dask_metrics.collector.store.redaction import split_credentials
from dask_metrics.collector.store.settings import (
    COMPRESSIONS,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRIES,
    MAX_TIMEOUT,
    READ_APIS,
    ConnectionSettings,
    valid_timeout,
)
from dask_metrics.configfile import ConfigError, load_yaml
from dask_metrics.options import Option

ENV_URL = "DASK_METRICS_PROMETHEUS_URL"


CONNECTION = (
    Option("user", None, "basic auth user (with --password-file)", "NAME"),
    Option("password_file", None, "file holding the password", "FILE", file=True),
    Option("bearer_token_file", None, "file holding a bearer token", "FILE", file=True),
    Option("header", None, "extra HTTP header, repeatable (e.g. 'X-Scope-OrgID: tenant-1')",
           "NAME:VALUE", repeat=True),
    Option("ca_file", None, "CA bundle to verify the server", "FILE", file=True),
    Option("cert", None, "client certificate (PEM)", "FILE", file=True),
    Option("key", None, "key of the client certificate (PEM)", "FILE", file=True),
    Option("timeout", None, "read timeout, or CONNECT,READ (default "
           f"{DEFAULT_CONNECT_TIMEOUT:g},{DEFAULT_READ_TIMEOUT:g})", "SECONDS"),
    Option("retries", None, "retries on connection errors, 429 and 5xx, with backoff "
           f"(default {DEFAULT_RETRIES})", "N"),
    Option("compression", None, f"response compression: {COMPRESSIONS[0]} (default) or "
           "none, faster where the network is fast (loopback, a LAN)", choices=COMPRESSIONS),
    Option("read_api", None, "how raw samples are read: query (default), remote-read "
           "(Prometheus' remote-read API) or export (VictoriaMetrics' export API): either "
           "spares a shared store's CPU, where it serves it", choices=READ_APIS),
)
"""The connection options besides the URL: the command line's, Monitor's keyword arguments,
a config file's keys and ``resolve``'s mapping are all made from this."""
OPTIONS = tuple(o.name for o in CONNECTION)
CONFIG_KEYS = ("prometheus", *("headers" if o.repeat else o.key for o in CONNECTION))
_FILE_KEYS = tuple(o.key for o in CONNECTION if o.file)


def load_config(path: str) -> dict[str, Any]:
    """The YAML config file as {key: value}; relative file paths in it are taken from the
    file's folder. Raises UsageError for a missing, unreadable or malformed file."""
    try:
        data = load_yaml(path)  # the exporter's reader: same file rules, same messages
    except ConfigError as exc:
        raise UsageError(f"--config {path}: {exc}") from None
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise UsageError(f"--config {path}: unknown key {unknown[0]!r} "
                         f"(known: {', '.join(CONFIG_KEYS)})")
    folder = Path(path).parent
    for key in _FILE_KEYS:
        if data.get(key) is not None:
            data[key] = str(folder / str(data[key]))
    return data


def read_secret(path: str, option: str) -> str:
    """The first line of a secret file (a trailing newline is not part of the secret)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror or exc}") from None
    lines = text.splitlines()
    if not lines or not lines[0]:
        raise UsageError(f"{option} {path}: the file is empty")
    return lines[0]


def parse_header(text: str) -> tuple[str, str]:
    """``Name: value`` (or ``Name:value``) of --header."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
        raise UsageError(f"--header expects NAME:VALUE, e.g. 'X-Scope-OrgID: tenant-1' "
                         f"(got {name.strip() or text!r}…)")
    return name.strip(), value.strip()


def parse_timeout(text: str) -> tuple[float, float]:
    """``READ`` or ``CONNECT,READ`` seconds of --timeout, each finite and at most
    MAX_TIMEOUT: a wait on a peer must end (and NaN or inf would fail deep in a request)."""
    parts = str(text).split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or not all(map(valid_timeout, values)):
        raise UsageError(f"--timeout expects SECONDS or CONNECT,READ seconds, each more than 0 "
                         f"and at most {MAX_TIMEOUT:g} (got {text!r})")
    if len(values) == 1:
        return min(DEFAULT_CONNECT_TIMEOUT, values[0]), values[0]
    return values[0], values[1]


def _headers(cli: Sequence[str], config: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(config, Mapping):
        pairs = [(str(k), str(v)) for k, v in config.items()]
    elif isinstance(config, list):
        pairs = [parse_header(str(h)) for h in config]
    elif config is None:
        pairs = []
    else:
        raise UsageError("--config: 'headers' must be a mapping of NAME: VALUE")
    return tuple(pairs + [parse_header(h) for h in cli])


def resolve(cli: Mapping[str, Any], environ: Mapping[str, str],
            config: Mapping[str, Any] | None = None) -> ConnectionSettings:
    """ConnectionSettings from the options (``prometheus`` and OPTIONS, by their argparse
    names). Raises UsageError."""
    config = config or {}

    def pick(name: str) -> Any:
        value = cli.get(name.replace("-", "_"))
        return value if value is not None else config.get(name)

    url = cli.get("prometheus") or environ.get(ENV_URL) or config.get("prometheus")
    if not url:
        raise UsageError(f"no Prometheus URL: give --prometheus URL, set {ENV_URL}, or put "
                         "'prometheus:' in a --config file")
    try:
        clean, url_user, url_password = split_credentials(str(url))
    except ValueError as exc:
        raise UsageError(f"--prometheus: {exc}") from None
    user = pick("user") if pick("user") is not None else url_user
    password_file, token_file = pick("password-file"), pick("bearer-token-file")
    password = read_secret(password_file, "--password-file") if password_file else url_password
    if password is not None and user is None:
        raise UsageError("--password-file needs --user (or user:password in the URL)")
    if user is not None and password is None:
        raise UsageError("--user needs --password-file (or user:password in the URL)")
    token = read_secret(token_file, "--bearer-token-file") if token_file else None
    if token and user is not None:
        raise UsageError("give basic auth (--user, user:password in the URL) or "
                         "--bearer-token-file, not both")
    if pick("key") and not pick("cert"):
        raise UsageError("--key needs --cert")
    timeout = pick("timeout")
    connect, read = (parse_timeout(timeout) if timeout is not None
                     else (DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT))
    raw_retries = pick("retries")
    try:
        retries = DEFAULT_RETRIES if raw_retries is None else int(raw_retries)
    except (TypeError, ValueError):
        retries = -1
    if retries < 0:
        raise UsageError(f"--retries expects 0 or more (got {raw_retries!r})")
    compression = str(pick("compression") or "gzip").lower()
    if compression not in COMPRESSIONS:
        raise UsageError(f"--compression expects {' or '.join(COMPRESSIONS)} "
                         f"(got {pick('compression')!r})")
    read_api = str(pick("read-api") or READ_APIS[0]).lower()
    if read_api not in READ_APIS:
        raise UsageError(f"--read-api expects {', '.join(READ_APIS)} "
                         f"(got {pick('read-api')!r})")
    for option in ("ca-file", "cert", "key"):
        path = pick(option)
        if path and not os.path.isfile(path):
            raise UsageError(f"--{option} {path}: no such file")
    return ConnectionSettings(
        url=clean, user=user, password=password, bearer_token=token,
        headers=_headers(cli.get("header") or [], config.get("headers")),
        ca_file=pick("ca-file"), cert=pick("cert"), key=pick("key"),
        connect_timeout=connect, read_timeout=read, retries=retries, compression=compression,
        read_api=read_api)
