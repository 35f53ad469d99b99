"""PromQL text: string literals and matchers that match values literally (pure)."""

from __future__ import annotations

from collections.abc import Sequence

_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def label(value: str) -> str:
    """A PromQL string literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def literal_matchers(name: str, values: Sequence[str] | str | None) -> list[str]:
    """``name="v"`` for one value, ``name=~"a|b"`` (each value matched literally; "" also
    matches a series without the label) for several, nothing for None."""
    if values is None:
        return []
    found = [values] if isinstance(values, str) else list(values)
    if len(found) == 1:
        return [f"{name}={label(found[0])}"]
    literal = "|".join("".join("\\" + c if c in _RE2_SPECIAL else c for c in value)
                       for value in found)
    return [f"{name}=~{label(literal)}"]


def narrower(sel: str, more: Sequence[str]) -> str:
    """The selector ``sel`` (``metric``, ``metric{…}`` or ``{…}``) with the matchers
    ``more`` too."""
    if not more:
        return sel
    if sel.endswith("}"):
        return f"{sel[:-1]},{','.join(more)}}}"
    return f"{sel}{{{','.join(more)}}}"
