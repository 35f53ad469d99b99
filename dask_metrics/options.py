"""How every part declares its options: once, as an ``Option`` (name, reader, help, what it
holds), from which its command-line flag, its environment variable, its config-file key and
its keyword argument are all made. The sidecar and the worker preload (exporter.config) and
the collector's connection (collector.connection) declare theirs this way."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    """``name``: the Python name (a keyword, a config dataclass field); ``parse``: reads a
    value from any layer (None: the part reads it itself); ``metavar``: what the value is;
    ``repeat``: given several times; ``choices``: the accepted words; ``file``: names a
    file (a config file's relative path is taken from its folder)."""

    name: str
    parse: Callable[[Any], Any] | None
    help: str
    metavar: str | None = None
    repeat: bool = False
    choices: tuple[str, ...] | None = None
    file: bool = False

    @property
    def flag(self) -> str:
        """The command line's spelling: ``--peak-window``."""
        return "--" + self.name.replace("_", "-")

    @property
    def key(self) -> str:
        """The config file's key: ``peak-window``."""
        return self.name.replace("_", "-")

    def env(self, prefix: str) -> str:
        """The environment variable: ``DASK_METRICS_EXPORTER_PEAK_WINDOW``."""
        return prefix + self.name.upper()


def add_arguments(parser: Any, options: Iterable[Option]) -> None:
    """Each option on an argparse parser or group, as declared."""
    for o in options:
        parser.add_argument(o.flag, dest=o.name, metavar=o.metavar, help=o.help,
                            choices=o.choices, action="append" if o.repeat else None)
