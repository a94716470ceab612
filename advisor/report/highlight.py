"""Python code snippets (a diagnosis's fix) highlighted as inline-styled HTML, kept between runs.

Pygments compiles a lexer's regular expressions the first time the lexer is
made: importing it and highlighting the first snippet took about 0.1 s of
every report, for the same few snippets of the built-in rules each time. The
highlighted HTML is stored in advisor's cache folder (see
:mod:`advisor.yamlio.yaml_cache`: one marshal file of plain strings, keyed by
the SHA-256 of the snippet together with Pygments' version and the formatter
options), so Pygments is imported only for a snippet not seen before.
"""

from __future__ import annotations

import atexit
import hashlib
import sys

from advisor.yamlio.yaml_cache import YamlCache, cache_dir

__all__ = ["python_html"]

#: inline styles, no wrapping <pre>: the page has no stylesheet for Pygments' classes
_FORMATTER_OPTIONS = {"nowrap": True, "noclasses": True}

_cache: YamlCache | None = None


def python_html(code: str) -> str:
    """``code`` as highlighted HTML (escaped: Pygments escapes the source text)."""
    html, _ = _shared().get_or_parse(code, lambda: (_highlight(code), {}))
    return html


def _highlight(code: str) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return highlight(code, PythonLexer(), HtmlFormatter(**_FORMATTER_OPTIONS))


def _shared() -> YamlCache:
    global _cache
    if _cache is None:
        import pygments  # its package module only (a few names): the version the entries are keyed on

        folder = cache_dir()
        name = f"highlight-py{sys.version_info[0]}{sys.version_info[1]}.marshal"
        key = hashlib.sha256(f"pygments {pygments.__version__} {sorted(_FORMATTER_OPTIONS.items())}".encode()).digest()
        _cache = YamlCache(folder / name if folder else None, key)
        atexit.register(_cache.save)
    return _cache
