"""The HTML of the report's fixed texts, kept between runs: fix snippets highlighted, knowledge entries rendered.

Both come from the rule and knowledge files, the same few texts run after
run, and both libraries are slow to start: Pygments compiles its lexer's
regular expressions when the first snippet is highlighted, and markdown-it
builds its parser; with their imports that was about 0.1 s of every report.
The HTML is stored in advisor's cache folder as :mod:`advisor.yamlio.yaml_cache`
stores parsed YAML (one marshal file of plain strings each, keyed by the
SHA-256 of the text together with the options and the installed library: the
path, size and time of its package file, which a reinstall changes; reading
its version would import it), so a library is imported only for a text not
seen before.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from importlib.util import find_spec

from advisor.yamlio.yaml_cache import named_cache

__all__ = ["markdown_html", "python_html"]

#: inline styles, no wrapping <pre>: the page has no stylesheet for Pygments' classes
_PYGMENTS_OPTIONS = {"nowrap": True, "noclasses": True}
#: CommonMark plus tables; raw HTML in the text is escaped, never passed through
_MARKDOWN_OPTIONS = ("commonmark", {"html": False}, "table")


def python_html(code: str) -> str:
    """``code`` highlighted as Python, in HTML with inline styles (Pygments escapes the source text)."""
    return _cached("highlight", "pygments", _PYGMENTS_OPTIONS, code, _highlight)


def markdown_html(text: str) -> str:
    """Markdown (a knowledge entry's section) as HTML; raw HTML in it is escaped."""
    return _cached("markdown", "markdown_it", _MARKDOWN_OPTIONS, text, _markdown)


def _highlight(code: str) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return highlight(code, PythonLexer(), HtmlFormatter(**_PYGMENTS_OPTIONS))


_markdown_parser: list[object] = []


def _markdown(text: str) -> str:
    if not _markdown_parser:
        from markdown_it import MarkdownIt

        preset, options, extra = _MARKDOWN_OPTIONS
        _markdown_parser.append(MarkdownIt(preset, options).enable(extra))
    return _markdown_parser[0].render(text)  # type: ignore[attr-defined]


def _cached(name: str, library: str, options: object, text: str, render: Callable[[str], str]) -> str:
    installed = _installed(library)
    if installed is None:  # a library we cannot identify without importing it: render, keep nothing
        return render(text)
    cache = named_cache(name, hashlib.sha256(f"{installed} {options!r}".encode()).digest())
    html, _ = cache.get_or_parse(text, lambda: (render(text), {}))
    return html


def _installed(library: str) -> str | None:
    """Where the library's package file is, its size and its time, without importing it; None if unknown."""
    spec = find_spec(library)
    if spec is None or not spec.origin:
        return None
    try:
        stat = os.stat(spec.origin)
    except OSError:
        return None
    return f"{spec.origin} {stat.st_size} {stat.st_mtime_ns}"
