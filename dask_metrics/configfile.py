"""Reading settings the same way in every part: YAML files of options, sizes in bytes, and
one exception type whose message is the one line a user sees."""

from __future__ import annotations

import os
import stat
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


MAX_CONFIG_BYTES = 1 << 20  # settings are a few kilobytes; a bigger file is a mistake


def read_small_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, else ValueError: a FIFO or a
    device would block or never end, a huge file would stall start-up. OSError as open()."""
    with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError(f"{os.fspath(path)}: not a regular file")
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise ValueError(f"{os.fspath(path)}: larger than {limit:,} bytes")
    return raw


def load_yaml(path: str) -> dict[str, Any]:
    """Read a YAML config file whose top level maps option names to values."""
    try:
        data = yaml.safe_load(read_small_file(path, MAX_CONFIG_BYTES).decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    except ValueError as exc:
        raise ConfigError(f"config file {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}".splitlines()[0]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of option names to values")
    return data
