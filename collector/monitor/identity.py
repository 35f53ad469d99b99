"""Telling monitor sessions apart on a scheduler every client shares: the owner a Monitor
starts its sessions as, whether two session records are one session, and the scheduler a
client talks to (named in messages).
"""

from __future__ import annotations

import getpass
import os
from typing import Any


def user_name() -> str:
    """The user's name for a session's owner (a uid where the system has no name for it)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid{os.getuid()}"


def same_session(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two session records are one session: ids count from 0 again when the
    scheduler restarts, the start time tells them apart."""
    return a.get("id") == b.get("id") and float(a.get("start") or 0) == float(b.get("start") or 0)


def address_of(client: Any) -> str | None:
    """The scheduler address of ``client`` while it is open (for messages)."""
    try:
        return str(client.scheduler.address)
    except Exception:  # not connected (yet): the messages do without it
        return None
