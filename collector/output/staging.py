"""How every collector output is published: files written in a thread while the next is
built, into a hidden staging folder moved into place only when the whole output succeeded,
so that a failure (an error, a signal, a full disk) leaves no file behind and a reader never
sees half an output."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import partial
from itertools import chain
from pathlib import Path

from dask_metrics.collector.output.csv_lines import csv_line
from dask_metrics.collector.work.background import Background
from dask_metrics.contract import JOBS_CSV


def write_text(item: tuple[Path, str], append: bool = False, last: bool = True) -> None:
    """A staged file's text (or, ``append``, more of it), on disk (synced) before the folder
    is published, once its ``last`` piece is written."""
    path, text = item
    with open(path, "a" if append else "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
        if last:
            fh.flush()
            os.fsync(fh.fileno())


def csv_text(header: Sequence[str] | None, lines: Iterable[str]) -> str:
    """A CSV file's text: the header (None: none, more of a file), then ``lines`` (CSV text
    without line ends)."""
    text = "\n".join(chain([csv_line(header)] if header is not None else [], lines))
    return text + "\n" if text else ""


class FileWriter:
    """CSV files written and synced in a thread while the next one is built: the write and
    its fsync wait on the disk without holding the GIL. One file (or piece of one) in flight
    at a time, so memory holds at most two of them."""

    def __init__(self) -> None:
        self._pending: Background[tuple[Path, str], None] | None = None

    def write(self, path: Path, header: Sequence[str] | None, lines: Iterable[str], *,
              last: bool = True) -> None:
        """A CSV file: the header, then ``lines`` (CSV text without line ends), in one write.
        A file written in pieces: the header with the first, None with the others, and
        ``last`` False but with the last (which syncs it)."""
        text = csv_text(header, lines)
        self.wait()
        self._pending = Background(partial(write_text, append=header is None, last=last),
                                   (path, text))

    def write_pieces(self, path: Path, header: Sequence[str],
                     pieces: Iterable[Iterable[str]]) -> None:
        """A CSV file of ``pieces`` of lines, each written while the next is made: what a
        file too big to hold at once is written in."""
        first, held = True, None
        for piece in pieces:
            if held is not None:
                self.write(path, header if first else None, held, last=False)
                first = False
            held = list(piece)
        self.write(path, header if first else None, held or [], last=True)

    def wait(self) -> None:
        """Until the file in flight is on disk; raises its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()


@contextmanager
def files_written() -> Iterator[FileWriter]:
    """A FileWriter whose file in flight is on disk (or failed) when the block is left, so that
    nothing writes into a staging folder being moved or removed. An error of the block is
    the one raised."""
    writer = FileWriter()
    try:
        yield writer
    except BaseException:
        with suppress(Exception):
            writer.wait()
        raise
    writer.wait()


def previous_files(out: Path) -> set[str]:
    """The files an earlier export wrote into ``out``, as its export.json lists them:
    plain names, and the tables' in its ``tables`` subfolder (``tables/jobs.csv``); a name
    with any other path in it is not ours to remove."""
    try:
        record = json.loads((out / "export.json").read_text(encoding="utf-8"))
        tables = record.get("tables") or ""
        names = [*record.get("files", []), "export.json"]
        beside = [*record.get("summaries", []), "workers.csv", JOBS_CSV]
    except (OSError, ValueError, AttributeError, TypeError):
        return set()

    def plain(name: object) -> bool:
        return isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name

    if tables and not plain(tables):
        return set()
    return {n for n in names if plain(n)} | {f"{tables}/{n}" if tables else n
                                             for n in beside if plain(n)}


def fixed_names(_out: Path) -> set[str]:
    """``staged``'s ``earlier`` for an output whose file names are the same every time: the
    new files replace the old ones, nothing else is removed."""
    return set()


@contextmanager
def staged(out: Path, manifest: str = "export.json",
           earlier: Callable[[Path], set[str]] = previous_files) -> Iterator[Path]:
    """A hidden folder whose files are moved into ``out`` on success: the rule every output
    of the collector is published by (exports, reports, pictures, the watcher's exports).

    A new ``out`` appears whole, by one rename of a folder made beside it (one that another
    collector made meanwhile is joined as an existing one); into an existing one (a mount
    point, a volume: renames cannot leave its file system) the folder is made inside it and
    each file is moved by its own atomic rename, the ``manifest`` (export.json,
    report.json) last, so that it never lists a file not yet in place; then the files of an
    earlier output (``earlier(out)``: an export's are those its export.json listed) that
    this one did not write are removed. Other files are left. On any failure the staging
    folder is removed and ``out`` is untouched.
    """
    anchor = out.absolute() if out.is_dir() else out.absolute().parent
    while not anchor.exists():
        anchor = anchor.parent
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=anchor))
    try:
        yield stage
        out.parent.mkdir(parents=True, exist_ok=True)
        if not out.exists():
            stage.chmod(0o755)  # mkdtemp made it private
            try:
                os.rename(stage, out)
                return
            except OSError as exc:
                # another collector published the same new folder first: join it as one
                # that existed, file by file (the last output written is the one in place)
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not out.is_dir():
                    raise
        old = earlier(out)
        written = _move_into(stage, out, manifest)
        for name in old - written:
            (out / name).unlink(missing_ok=True)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _move_into(stage: Path, out: Path, manifest: str) -> set[str]:
    """Move the staged files into ``out``, each by an atomic rename, a subfolder's files
    into the same subfolder there, the manifest last; returns their relative names."""
    written = set()
    for item in sorted(stage.iterdir(), key=lambda item: item.name == manifest):
        if item.is_dir():
            (out / item.name).mkdir(exist_ok=True)
            for inner in item.iterdir():
                os.replace(inner, out / item.name / inner.name)
                written.add(f"{item.name}/{inner.name}")
            item.rmdir()
        else:
            os.replace(item, out / item.name)
            written.add(item.name)
    stage.rmdir()
    return written
