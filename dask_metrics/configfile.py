"""Reading settings the same way in every part: YAML files of options, sizes in bytes, and
one exception type whose message is the one line a user sees."""

from __future__ import annotations

from typing import Any

import yaml


class ConfigError(ValueError):
    """A bad option: the message is one line that names the option and the value."""


_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_bytes(value: Any) -> float:
    """``17179869184``, ``16GiB``, ``512MiB``, ``2G``: a positive number of bytes."""
    text = str(value).strip().lower().removesuffix("b")
    digits = text.rstrip("kmgti")
    unit = text[len(digits):]
    try:
        number = float(digits) * _UNITS[unit]
    except (KeyError, ValueError):
        raise ValueError("must be bytes, optionally with a unit such as 512MiB or 16GiB") from None
    if not number > 0:
        raise ValueError("must be more than 0 bytes")
    return number


def load_yaml(path: str) -> dict[str, Any]:
    """Read a YAML config file whose top level maps option names to values."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}".splitlines()[0]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of option names to values")
    return data
