"""Fix snippets and knowledge entries become the HTML their libraries make, read back from the cache after.

:mod:`advisor.report.snippets` keeps the HTML between runs; a second process must give the same HTML without
importing Pygments' lexers or markdown-it at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

SNIPPET = 'loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)  # "<fast>" & more\n'
MARKDOWN = "Workers **overlap** loading with the step.\n\n| a | b |\n|---|---|\n| 1 | <script>x</script> |\n"

PROBE = f"""
import json, sys
from advisor.report.snippets import markdown_html, python_html
out = {{"python": python_html({SNIPPET!r}), "markdown": markdown_html({MARKDOWN!r}),
        "imported": [m for m in ("pygments.lexers", "markdown_it") if m in sys.modules]}}
print(json.dumps(out))
"""


def _in_a_process(cache: str) -> dict:
    env = {**os.environ, "ADVISOR_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out)


def _expected() -> tuple[str, str]:
    python = highlight(SNIPPET, PythonLexer(), HtmlFormatter(nowrap=True, noclasses=True))
    return python, MarkdownIt("commonmark", {"html": False}).enable("table").render(MARKDOWN)


def test_the_libraries_html_then_the_same_from_the_cache_without_them(tmp_path: Path) -> None:
    python, markdown = _expected()
    first, second = _in_a_process(str(tmp_path)), _in_a_process(str(tmp_path))
    assert first["python"] == second["python"] == python
    assert first["markdown"] == second["markdown"] == markdown
    assert "&lt;script&gt;" in second["markdown"] and "<script>" not in second["markdown"]  # escaped, cached too
    assert "&lt;fast&gt;" in second["python"]
    assert first["imported"] == ["pygments.lexers", "markdown_it"] and second["imported"] == []


def test_no_cache_folder_still_renders(tmp_path: Path) -> None:
    python, markdown = _expected()
    out = _in_a_process("")
    assert (out["python"], out["markdown"]) == (python, markdown)
    assert not list(tmp_path.iterdir())
