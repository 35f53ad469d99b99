"""Credentials kept out of every message: user:password split off a URL, and every form in
which a server may echo a secret back, masked."""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus, unquote, urlsplit, urlunsplit

SNIPPET = 200
"""The most characters of a server's text a message quotes."""


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


class Scrubber:
    """Masks the secrets of one connection in any text (``***``) and removes user:password
    from URLs in it. Longest forms first, so a secret that contains another is masked whole;
    any case, as servers may echo headers lower-cased."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = sorted({f for s in secrets if s for f in secret_forms(s)}, key=len, reverse=True)
        self._secrets = (re.compile("|".join(map(re.escape, forms)), re.IGNORECASE) if forms
                         else None)

    def __call__(self, text: str) -> str:
        if self._secrets is not None:
            text = self._secrets.sub("***", text)
        return redact_url(text)

    def snippet(self, text: str, limit: int = SNIPPET, ends: bool = False) -> str:
        """A server's text for a message: masked before it is cut short, so no part of a
        secret is left at the cut. ``ends``: a long one keeps its start and, longer, its
        end, where a Go server's wrapped error (VictoriaMetrics' after the query it echoes)
        says its cause."""
        text = " ".join(self(text).split())
        if not ends or len(text) <= limit:
            return one_line(text, limit)
        head = (limit - 3) // 3
        return f"{text[:head]} … {text[-(limit - 3 - head):]}"


def one_line(text: str, limit: int = SNIPPET) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
