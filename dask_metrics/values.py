"""The value readers every part's options share (the sidecar's, both preloads', the
collector's and Monitor's): a number, a whole number, a truth value, from what a command
line, an environment variable, YAML, Dask config or a Python caller gives. Each answers None
for a value it cannot read; the caller words the error with its option's name."""

from __future__ import annotations

import math
from typing import Any

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def finite_number(value: Any, *, text: bool = True) -> float | None:
    """A finite number; not a bool (YAML's ``true`` is no number, though ``float()`` says 1),
    NaN or infinity. ``text``: also from a string ("2.5"), as options arrive."""
    if isinstance(value, bool) or (not text and not isinstance(value, int | float)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def whole_number(value: Any) -> int | None:
    """A whole number ("3", 3, 3.0), not a bool and not 2.5."""
    if isinstance(value, bool):
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        found = finite_number(value)
        return int(found) if found is not None and found == int(found) else None
    return number


def truth(value: Any) -> bool | None:
    """True or False from a bool or the usual words (1/0, true/false, yes/no, on/off)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return True if text in TRUE else False if text in FALSE else None
