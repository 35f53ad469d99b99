"""Write files so that readers see the old content or the new one, never half of it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: int = 0o644,
                binary: bool = False) -> Iterator[IO[Any]]:
    """A file to write that replaces ``path`` only when the block ends without an error.

    It is a temporary file in the same folder, renamed over ``path``: a crash, an exception
    or a full disk leaves the previous file (or none) and no temporary behind.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with (os.fdopen(fd, "wb") if binary
              else os.fdopen(fd, "w", encoding="utf-8", newline="")) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` atomically (see ``atomic_open``)."""
    atomic_write_texts({path: text}, mode)


def atomic_write_texts(files: Mapping[str | os.PathLike[str], str], mode: int = 0o644) -> None:
    """Write files that belong together (a page and its numbers): each is written in full
    and synced to its temporary before any replaces its old version, so a full disk or an
    error leaves every old file, never a new one beside an old one."""
    with ExitStack() as stack:
        for path, text in files.items():
            fh = stack.enter_context(atomic_open(path, mode))
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
