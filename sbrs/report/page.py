"""The HTML page of ``sbrs report``: one self-contained file that opens offline.

Every picture is embedded in the page as a ``data:`` URI (base64 PNG), and the style is inline, so the page
can be mailed, attached to an issue or opened on a machine without the folder or a network. Everything written
on it is escaped (``html.escape``): scenario names and file paths come from the user's app file.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
img { max-width: 100%; border: 1px solid #eee; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.none { background: #fff6e0; border-left: 4px solid #e0a000; padding: 0.5em 0.8em; }
nav a { margin-right: 1em; }
"""


@dataclass(frozen=True)
class Table:
    """A table of the page: a header row and rows of cells (text, escaped when written)."""

    header: Sequence[str]
    rows: Sequence[Sequence[str]]


@dataclass(frozen=True)
class Section:
    """One part of the page: a title, what it shows in words, and its picture, its tables, or a note saying
    plainly why there is none (``missing``)."""

    id: str
    title: str
    text: Sequence[str] = ()
    picture: Path | None = None
    tables: Sequence[Table] = ()
    missing: str | None = None
    links: Sequence[tuple[str, str]] = ()  # (file name beside the page, what it is)
    preformatted: str | None = None
    extra: Sequence[str] = field(default=())


def _text(text: str) -> str:
    """Escaped text, with `backquoted` spans (commands, file names) as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in table.header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in table.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _image(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt, quote=True)}">'


def _section(section: Section) -> str:
    parts = [f'<section id="{html.escape(section.id, quote=True)}"><h2>{html.escape(section.title)}</h2>']
    parts += [f"<p>{_text(text)}</p>" for text in section.text]
    if section.preformatted is not None:
        parts.append(f"<pre>{html.escape(section.preformatted)}</pre>")
    if section.missing is not None:
        parts.append(f'<p class="none">{_text(section.missing)}</p>')
    if section.picture is not None:
        parts.append(_image(section.picture, section.title))
    parts += [_table(table) for table in section.tables]
    parts += [f"<p>{_text(text)}</p>" for text in section.extra]
    if section.links:
        items = "".join(f'<li><a href="{html.escape(name, quote=True)}">{html.escape(name)}</a>: '
                        f"{_text(what)}</li>" for name, what in section.links)
        parts.append(f"<ul>{items}</ul>")
    parts.append("</section>")
    return "\n".join(parts)


def write_page(path: Path, title: str, intro: Sequence[str], sections: Sequence[Section]) -> Path:
    """Write the page: the title, the introduction, a table of contents and every section."""
    nav = "".join(f'<a href="#{html.escape(s.id, quote=True)}">{html.escape(s.title)}</a>' for s in sections)
    document = "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
        f"<h1>{html.escape(title)}</h1>", *(f"<p>{_text(text)}</p>" for text in intro), f"<nav>{nav}</nav>",
        *(_section(section) for section in sections), "</body>", "</html>", ""])
    path.write_text(document, encoding="utf-8")
    return path
