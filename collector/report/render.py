"""The report's page and its terminal text (pure): ``layout.sections`` lays report.json's
numbers out once, as headings, figures, notes, tables and lists with units; ``render_html``
and ``render_text`` only draw that layout, so the page and the terminal show the same
sections and numbers, in the order people read them.

The page is one self-contained file: styles inline, charts as inline SVG, and a Content
Security Policy that forbids the browser any request at all (``default-src 'none'``). Words
are never broken: a cell wraps at its spaces only, a token with hyphens or slashes (a time, a
GPU's UUID) is kept whole unless it is wider than the page, and wide tables scroll in their
own box.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from dask_metrics.collector.report.first_screen import session_line
from dask_metrics.collector.report.layout import sections, title
from dask_metrics.collector.report.parts import Section, Table

CSP = "default-src 'none'; style-src 'unsafe-inline'"
STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1280px;padding:8px 24px 16px;color:#1b1f24;background:#fff;line-height:1.35;
overflow-wrap:break-word}
h1{font-size:1.45em;margin:.2em 0 .1em}h2{font-size:1.2em;border-bottom:2px solid #d0d7de;
padding-bottom:.15em;margin:1.1em 0 .4em}h3{font-size:1em;margin:1em 0 .3em}
.sub{margin:.1em 0 .4em;color:#57606a}
.figs{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:8px;
margin:.5em 0}.fig{border:1px solid #d0d7de;border-radius:6px;padding:5px 9px}
.fig>b{display:block;font-size:1.3em;font-variant-numeric:tabular-nums}
.fig>small,.fig>span{color:#57606a;font-size:.85em}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.3em 0 .6em;font-size:.9em}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f7}td.n,th.n{text-align:right}td.n{font-variant-numeric:tabular-nums;
white-space:nowrap}
.w{display:inline-block;max-width:100%;overflow-wrap:anywhere}td .w,th .w{display:inline;
white-space:nowrap}
.up{color:#a40e26}.down{color:#116329}
.banner{background:#fff4d6;border:2px solid #d4a72c;padding:6px 12px;font-weight:600;
margin:.4em 0}.note{color:#57606a;margin:.3em 0}.warn{color:#7d4e00}
ol,ul{margin:.3em 0;padding-left:1.4em}li{margin:.2em 0}
details{margin:.3em 0}summary{cursor:pointer;color:#0550ae}
figure svg{max-width:100%;height:auto;border:1px solid #d0d7de}figure{margin:.8em 0}
"""


# ---- HTML --------------------------------------------------------------------------------------

_BREAKABLE = re.compile(r"\S*[\w:][-/]\S*")  # a token a browser may break at a hyphen or slash


def _words(text: str) -> str:
    """Escaped text whose hyphenated tokens stay whole (broken only when wider than the
    page)."""
    out, last = [], 0
    for m in _BREAKABLE.finditer(text):
        out += [html.escape(text[last:m.start()]),
                f"<span class=w>{html.escape(m.group())}</span>"]
        last = m.end()
    return "".join(out) + html.escape(text[last:])


def _change_class(cell: str) -> str:
    return " up" if cell.startswith("+") else " down" if cell.startswith("-") and \
        cell[1:2].isdigit() else ""


def _rows_html(table: Table, rows: Sequence[list[str]]) -> str:
    return "".join("<tr>" + "".join(
        f'<td class="{"n" if i in table.numeric else ""}{_change_class(c)}">{_words(c)}</td>'
        for i, c in enumerate(row)) + "</tr>" for row in rows)


def _html_table(table: Table) -> str:
    head = "".join(f'<th{" class=n" if i in table.numeric else ""}>{_words(h)}</th>'
                   for i, h in enumerate(table.headers))
    shown = len(table.rows) if table.shown is None else table.shown
    first = (f"<div class=scroll><table><thead><tr>{head}</tr></thead><tbody>"
             f"{_rows_html(table, table.rows[:shown])}</tbody></table></div>")
    rest = table.rows[shown:]
    if not rest:
        return first
    return (f"{first}<details><summary>{len(rest)} more row(s)</summary><div class=scroll>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{_rows_html(table, rest)}"
            "</tbody></table></div></details>")


def _section_html(s: Section, charts: Mapping[str, str]) -> list[str]:
    parts = [f"<section id={s.anchor}>" if s.anchor else "",
             f"<h{s.level}>{_words(s.title)}</h{s.level}>"]
    if s.banner:
        parts.append(f"<div class=banner role=alert>{_words(s.banner)}</div>")
    if s.figures:
        parts.append("<div class=figs>" + "".join(
            f"<div class=fig><small>{_words(label)}</small><b>{_words(value)}</b>"
            f"<span>{_words(detail)}</span></div>" for label, value, detail in s.figures)
            + "</div>")
    parts += [f'<p class="note{" warn" if "warning" in n else ""}">{_words(n)}</p>'
              for n in s.notes]
    if s.table is not None and s.table.rows:
        parts.append(_html_table(s.table))
    if s.items:
        parts.append("<ol>" + "".join(f"<li>{_words(i)}</li>" for i in s.items) + "</ol>")
    if s.more_items:
        parts.append(f"<details><summary>{len(s.more_items)} more</summary>"
                     f"<ol start={len(s.items) + 1}>"
                     + "".join(f"<li>{_words(i)}</li>" for i in s.more_items)
                     + "</ol></details>")
    for name, caption in s.images:
        if name in charts:
            parts.append(f"<figure>{charts[name]}<figcaption>{_words(caption)}"
                         "</figcaption></figure>")
    if s.anchor:
        parts.append("</section>")
    return parts


def render_html(report: Mapping[str, Any], charts: Mapping[str, str]) -> str:
    """The page; ``charts``: {name: SVG element} of the plots."""
    e = html.escape
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
             f'<meta name=viewport content="width=device-width,initial-scale=1">'
             f"<title>{e(title(report))}</title><style>{STYLE}</style></head><body>"
             f"<h1>{_words(title(report))}</h1><p class=sub>{_words(session_line(report))}"
             "</p>"]
    for s in sections(report):
        parts += _section_html(s, charts)
    s = report["session"]
    parts.append(f"<p class=note>Written by dask-metrics {e(str(s.get('dask_metrics')))}; every "
                 "number on this page is in report.json beside it.</p></body></html>")
    return "".join(parts) + "\n"


# ---- text --------------------------------------------------------------------------------------


def _text_table(table: Table) -> list[str]:
    lines = [table.headers, *table.rows]
    widths = [max(len(row[i]) for row in lines) for i in range(len(table.headers))]
    return ["  ".join(cell.rjust(w) if i in table.numeric else cell.ljust(w)
                      for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in lines]


def render_text(report: Mapping[str, Any]) -> str:
    """The same sections for a terminal (charts are on the page only; nothing folded)."""
    out = [title(report), "=" * len(title(report)), session_line(report)]
    for s in sections(report):
        out += ["", s.title, ("-" if s.level == 2 else "~") * len(s.title)]
        if s.banner:
            out.append(f"!!! {s.banner}")
        width = max((len(label) for label, _, _ in s.figures), default=0)
        out += [f"{label.ljust(width)}  {value}" + (f"  ({detail})" if detail else "")
                for label, value, detail in s.figures]
        out += s.notes
        if s.table is not None and s.table.rows:
            out += _text_table(s.table)
        out += [f"{n}. {i}" for n, i in enumerate([*s.items, *s.more_items], 1)]
        out += [f"[chart: {caption}]" for _, caption in s.images]
    return "\n".join(out) + "\n"
