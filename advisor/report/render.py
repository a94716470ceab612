"""Markdown and HTML reports, rendered with jinja2 from the serialized report data.

One generic diagnosis template serves every rule. HTML autoescapes
everything that comes from a trace (kernel names like ``void f<float>``,
file paths with quotes), so nothing in a trace can inject markup.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2

from advisor.resources import templates_dir
from advisor.units import fmt_bytes, fmt_ms, fmt_num, fmt_pct

__all__ = ["render_html", "render_markdown", "write_reports"]


def _safe(fmt: Callable[[float], str]) -> Callable[[Any], str]:
    def render(value: Any) -> str:
        if value is None or isinstance(value, str):
            return "n/a" if value is None else value
        return fmt(float(value))

    return render


def _md_cell(value: Any) -> str:
    """Text made safe for one Markdown table cell: no pipes, no line breaks, no raw HTML."""
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def _md_code(value: Any) -> str:
    """A name (kernel, op, path) as inline code in a Markdown table cell."""
    text = ("" if value is None else str(value)).replace("`", "'").replace("|", "\\|").replace("\n", " ")
    return f"`{text}`" if text else ""


def _value(value: Any) -> str:
    """A fact value for people: floats to 3 significant digits, booleans as yes/no."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else str(value)


def _shorten(value: Any, width: int = 60) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(pct=_safe(fmt_pct), ms=_safe(fmt_ms), num=_safe(fmt_num), size=_safe(fmt_bytes),
                       cell=_md_cell, code=_md_code, shorten=_shorten, value=_value)
    return env


def render_markdown(data: dict[str, Any]) -> str:
    return _environment(autoescape=False).get_template("report.md.j2").render(**data)


def render_html(data: dict[str, Any]) -> str:
    return _environment(autoescape=True).get_template("report.html.j2").render(**data)


def write_reports(data: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    paths = {"markdown": out_dir / "report.md", "html": out_dir / "report.html"}
    paths["markdown"].write_text(render_markdown(data), encoding="utf-8")
    paths["html"].write_text(render_html(data), encoding="utf-8")
    return paths
