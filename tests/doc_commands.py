"""The commands written in README.md and docs/*.md, as tests/test_docs.py accounts for them.

A command is a line of a ```bash, ```sh, ```shell or ```console fenced block (in a console
block, only the lines that start with ``$ ``), with continuation lines (ending in ``\\``)
joined, the comment cut off and runs of blank space made one space. A ```python block is
one example, named by its first line of code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md, CONTRIBUTING.md and every docs/*.md, in a stable order."""
    return [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the first line inside the fence
    language: str
    lines: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


@dataclass(frozen=True)
class Command:
    text: str
    path: Path
    line: int

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced code block of a Markdown file (an unclosed fence is an error)."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, language = m.group(2), m.group(3).lower()
        start = i + 1
        j = start
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        if j == len(lines):
            raise ValueError(f"{path}:{i + 1}: unclosed code fence")
        blocks.append(Block(path, start + 1, language, tuple(lines[start:j])))
        i = j + 1
    return blocks


def strip_comment(line: str) -> str:
    """``line`` without its shell comment: a ``#`` outside quotes that starts a word."""
    quote = ""
    escaped = False
    for k, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k]
    return line


def normalise(text: str) -> str:
    return " ".join(text.split())


def block_commands(block: Block) -> list[Command]:
    """The commands of one shell or console block."""
    commands: list[Command] = []
    pending = ""
    pending_line = 0
    for offset, raw in enumerate(block.lines):
        number = block.line + offset
        line = raw.rstrip()
        if block.language == "console" and not pending:
            if not line.lstrip().startswith("$ "):
                continue  # output
            line = line.lstrip()[2:]
        line = strip_comment(line).rstrip()
        if not pending:
            pending_line = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        text = normalise(pending)
        if text:
            commands.append(Command(text, block.path, pending_line))
        pending = ""
    if normalise(pending):
        raise ValueError(f"{block.where}: a continuation line ends the block")
    return commands


def shell_commands(paths: list[Path] | None = None) -> list[Command]:
    """Every command of every shell and console block of the docs."""
    out: list[Command] = []
    for path in paths if paths is not None else doc_files():
        for block in fenced_blocks(path):
            if block.language in SHELL_LANGUAGES:
                out += block_commands(block)
    return out


def python_blocks(paths: list[Path] | None = None) -> list[Block]:
    return [block for path in (paths if paths is not None else doc_files())
            for block in fenced_blocks(path) if block.language in ("python", "py", "pycon")]


def python_key(block: Block) -> str:
    """A python example's name: its file and its first line that is neither blank nor a
    comment."""
    first = next((normalise(line) for line in block.lines
                  if line.strip() and not line.lstrip().startswith("#")), "")
    return f"{block.path.relative_to(ROOT)}: {first}"
