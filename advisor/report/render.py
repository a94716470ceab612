"""Markdown and HTML reports, rendered with jinja2 from the serialized report data.

One generic diagnosis template serves every rule. HTML autoescapes
everything that comes from a trace (kernel names like ``void f<float>``,
file paths with quotes), links pass through :func:`safe_url`, and the page
carries a Content-Security-Policy that allows no script and no request
beyond its own inline images, so nothing in a trace can run or phone home.
Charts are inline ``data:`` SVG images in the HTML (one self-contained file)
and ``charts/<id>.svg`` files beside the Markdown.

Markdown is meant to be read as plain text too: prose is wrapped, names
from traces sit in code spans, and table cells are shortened so that rows
stay within :data:`advisor.report.markdown.WIDTH` characters.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import jinja2
from markupsafe import Markup

from advisor.report.snippets import markdown_html, python_html
from advisor.report.markdown import (evidence_columns, evidence_kind, fact_value, md_cell, md_code, md_table,
                                     md_text, shorten, wrap)
from advisor.yamlio.yaml_cache import cache_dir
from advisor.resources import templates_dir
from advisor.units import fmt_bytes, fmt_ms, fmt_num, fmt_pct

__all__ = ["render_html", "render_markdown", "safe_url", "write_charts", "write_reports"]

CHARTS = "charts"


def _safe(fmt: Callable[[float], str]) -> Callable[[Any], str]:
    def render(value: Any) -> str:
        if value is None or isinstance(value, str):
            return "n/a" if value is None else value
        return fmt(float(value))

    return render


def safe_url(value: Any) -> str:
    """A link target that cannot run code: http(s), file, mailto or a relative path; else '#'."""
    url = str(value or "").strip()
    scheme = urlsplit(url).scheme.lower()
    return url if scheme in ("", "http", "https", "file", "mailto") and not url.startswith("//") else "#"


def _file_href(path: Any) -> str:
    """A link to a file named by a path relative to the report (characters like '#' or ' ' quoted)."""
    text = str(path or "")
    return safe_url(text) if urlsplit(text).scheme else quote(text)


def _autolink(value: Any) -> str:
    """A URL as a Markdown autolink when it is a safe one, else as inert text."""
    url = safe_url(value)
    if url != "#" and not any(c in url for c in " <>\t\n"):
        return f"<{url}>"
    return md_text(value)


def _quote(text: Any) -> str:
    """Markdown (a knowledge section) as a block quote."""
    return "\n".join(f"> {line}".rstrip() for line in str(text or "").splitlines())


def _evidence_cell(value: Any, column: str) -> str:
    """An evidence value formatted by its column's name (``*_ms``, ``share``, ``*_per_step``)."""
    fmt = {"ms": fmt_ms, "pct": fmt_pct, "num": fmt_num}.get(evidence_kind(str(column)))
    if fmt and isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt(float(value))
    return fact_value(value)


def _markdown_html(text: Any) -> Markup:
    """Trusted-format, untrusted-content Markdown (knowledge entries) to HTML; raw HTML is escaped."""
    return Markup(markdown_html(str(text or "")))


def _python_html(code: Any) -> Markup:
    """A code snippet, highlighted with inline styles (no stylesheet or script needed)."""
    return Markup(python_html(str(code or "")))


def _data_uri(svg: str | None) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode((svg or "").encode("utf-8")).decode("ascii")


class _CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """The report templates compiled once per machine: compiling them took longer than rendering a report.

    Jinja keys each entry by the template's name and checks it against the source, so an edited template is
    compiled afresh. A cache folder that cannot be written costs the compile, never the report.
    """

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _compiled_templates(autoescape: bool) -> jinja2.BytecodeCache | None:
    folder = cache_dir()
    if folder is None:  # $ADVISOR_CACHE_DIR set empty: no cache
        return None
    # the same template compiles differently with and without autoescaping
    folder = folder / "templates" / ("html" if autoescape else "text")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _CompiledTemplates(str(folder))


@functools.lru_cache(maxsize=2)
def _environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        bytecode_cache=_compiled_templates(autoescape),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(signed_ms=_safe(lambda v: ("+" if v > 0 else "") + fmt_ms(v)),
                       signed_pct=_safe(lambda v: ("+" if v > 0 else "") + fmt_pct(v)),
                       pct=_safe(fmt_pct), ms=_safe(fmt_ms), num=_safe(fmt_num), size=_safe(fmt_bytes),
                       cell=md_cell, text=md_text, code=md_code, shorten=shorten, value=fact_value, wrap=wrap,
                       mdtable=md_table, quote=_quote, columns=evidence_columns, evidence=_evidence_cell, autolink=_autolink,
                       url=safe_url, file_href=_file_href, markdown=_markdown_html, python=_python_html,
                       data_uri=_data_uri)
    return env


def render_markdown(data: dict[str, Any], template: str = "report.md.j2") -> str:
    return _environment(autoescape=False).get_template(template).render(**data)


def render_html(data: dict[str, Any], template: str = "report.html.j2") -> str:
    return _environment(autoescape=True).get_template(template).render(**data)


def write_charts(data: dict[str, Any], out_dir: Path) -> None:
    """Write each drawn chart to ``charts/<id>.svg`` (old ones removed) and note the file in the data."""
    folder = out_dir / CHARTS
    for old in folder.glob("*.svg") if folder.is_dir() else []:
        old.unlink()
    charts = [*data.get("charts", []), *([data["trail"]["chart"]] if data.get("trail") else [])]
    for chart in charts:
        if chart.svg:
            folder.mkdir(exist_ok=True)
            (folder / f"{chart.id}.svg").write_text(chart.svg, encoding="utf-8")


def write_reports(data: dict[str, Any], out_dir: Path, stem: str = "report") -> dict[str, Path]:
    """Render ``<stem>.md`` and ``<stem>.html`` (and the chart files) into ``out_dir``."""
    write_charts(data, out_dir)
    paths = {"markdown": out_dir / f"{stem}.md", "html": out_dir / f"{stem}.html"}
    paths["markdown"].write_text(render_markdown(data, f"{stem}.md.j2"), encoding="utf-8")
    paths["html"].write_text(render_html(data, f"{stem}.html.j2"), encoding="utf-8")
    return paths
