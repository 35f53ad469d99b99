"""Label values safe to export: the tracker, the activity ledger and the fine-grained
scheduler series all label series with text that clients and tasks chose."""

from __future__ import annotations


def clean_label(value: object, max_length: int) -> str:
    """A label value safe to export: printable characters only, at most ``max_length``."""
    text = "".join(ch if ch.isprintable() else "?" for ch in str(value))
    if len(text) > max_length:
        text = text[: max_length - 1] + "…"
    return text
