"""Fix snippets are highlighted as Pygments does, and read back from the cache without importing its lexers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

SNIPPET = 'loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)  # "<fast>" & more\n'

PROBE = f"""
import sys
from advisor.report.highlight import python_html
print(python_html({SNIPPET!r}), end="")
print("\\nLEXERS", "pygments.lexers" in sys.modules, end="")
"""


def _highlight_in_a_process(cache: Path) -> tuple[str, bool]:
    env = {**os.environ, "ADVISOR_CACHE_DIR": str(cache)}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True).stdout
    html, lexers = out.rsplit("\nLEXERS ", 1)
    return html, lexers == "True"


def test_the_same_html_as_pygments_and_the_second_run_reads_it_from_the_cache(tmp_path: Path) -> None:
    expected = highlight(SNIPPET, PythonLexer(), HtmlFormatter(nowrap=True, noclasses=True))
    first, lexers_first = _highlight_in_a_process(tmp_path)
    second, lexers_second = _highlight_in_a_process(tmp_path)
    assert first == second == expected
    assert "&lt;fast&gt;" in first and "<fast>" not in first  # escaped, from the cache too
    assert (lexers_first, lexers_second) == (True, False)


def test_no_cache_folder_still_highlights(tmp_path: Path) -> None:
    env = {**os.environ, "ADVISOR_CACHE_DIR": ""}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True).stdout
    assert out.startswith(highlight(SNIPPET, PythonLexer(), HtmlFormatter(nowrap=True, noclasses=True)))
