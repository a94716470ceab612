"""Reports of real runs: every part is there, every link resolves, and nothing from a trace becomes markup."""

from __future__ import annotations

import json

import html as htmlmod
import re
import shutil
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from advisor.knowledge import load_entry
from advisor.report.markdown import WIDTH
from conftest import run_cli
from html_checks import assert_inert, local_links
from report_helpers import EVIL_FILE, EVIL_MODULE, EVIL_OP, TEMPLATE_KERNEL, enriched_run

pytestmark = pytest.mark.slow
GFM = MarkdownIt("commonmark", {"html": True}).enable("table")


def _long_prose_lines(markdown: str) -> list[str]:
    """Lines over the width outside code blocks (also those indented into a list item), other than a lone link
    or image."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip(" ").startswith("```"):
            fenced = not fenced
            continue
        if fenced or len(line) <= WIDTH or re.fullmatch(r"(- )?(<\S+>|!\[[^\]]*\]\(\S+\))", line):
            continue
        out.append(line)
    return out


def test_real_report_has_every_part(diagnosed_examples) -> None:
    run = diagnosed_examples["slow_dataloader"].path
    html = (run / "report.html").read_text()
    page = assert_inert(html)
    ids = {attrs.get("id") for _, attrs in page.tags}
    assert {"summary", "ranked", "diagnoses", "DL001", "charts", "tables", "trail", "reproduce"} <= ids
    text = " ".join(htmlmod.unescape(" ".join(page.text)).split())
    # the summary ranks DL001 with one line of what, where and fix
    ranked = html[html.index('id="ranked"'):html.index("</ol>", html.index('id="ranked"'))]
    assert "DL001" in ranked and "slow_dataloader.py:" in ranked and "Fix: Load batches in background workers" in ranked
    # the diagnosis: source context with the planted line highlighted, the knowledge entry's why, the fix, confidence
    assert re.search(r'<span class="hit"><span class="ln">\s*\d+</span>\s+for images, labels in loader:', html)
    why = load_entry("dataloader-starvation").sections["Why it slows training"].split()[:6]
    assert " ".join(why).replace("`", "") in text.replace("`", "")
    assert "num_workers" in html and "confidence" in text and "medium" in text
    # charts are inline images; the ones without data say why
    assert html.count('src="data:image/svg+xml;base64,') >= 3
    assert "GPU busy and idle over the analysed steps: not available" in text
    # reproduction: the advisor command, re-render and compare, and how to open the trace
    assert "advisor diagnose" in text and f"advisor report {run.resolve()}" in text and "advisor compare" in text
    assert "ui.perfetto.dev" in html and "chrome://tracing" in text
    for target in local_links(html, run):
        assert target.exists(), target


def test_real_markdown_is_plain_text_and_renders(diagnosed_examples) -> None:
    run = diagnosed_examples["slow_dataloader"].path
    markdown = (run / "report.md").read_text()
    tables = [line for line in markdown.splitlines() if line.startswith("|")]
    assert tables and max(len(line) for line in tables) <= WIDTH
    assert not _long_prose_lines(markdown)
    for section in ("## Summary", "### What to do first", "## Diagnoses", "## Charts", "## Escalation trail",
                    "## Environment and reproduction"):
        assert section in markdown
    for chart in re.findall(r"!\[[^\]]*\]\((charts/[^)]+)\)", markdown):
        assert (run / chart).is_file(), chart
    rendered = GFM.render(markdown)
    assert rendered.count("<table>") >= 5 and "<script" not in rendered


@pytest.fixture(scope="module")
def enriched(diagnosed_examples, tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("enriched")
    run, rules = enriched_run(diagnosed_examples["slow_dataloader"].path, base / "run")
    result = run_cli("report", str(run), "--rules", str(rules), "-q", cwd=base)
    assert result.code == 0, result.output
    return run


def test_future_facts_are_shown_and_escaped(enriched: Path) -> None:
    html = (enriched / "report.html").read_text()
    page = assert_inert(html)
    text = " ".join(" ".join(page.text).split())
    assert EVIL_OP in text and EVIL_MODULE in text and EVIL_FILE in text and TEMPLATE_KERNEL[:60] in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # the user rule fired on the hostile kernel; the ranking follows the estimated gains
    ranked = html[html.index('id="ranked"'):]
    gains = {d["rule_id"]: d["impact_ms"] for d in json.loads((enriched / "diagnoses.json").read_text())["diagnoses"]}
    first, second = sorted(("DL001", "KRN901"), key=lambda rule: -gains[rule])  # DL001's gain depends on load
    assert 0 < ranked.index(f'href="#{first}"') < ranked.index(f'href="#{second}"')
    assert 'href="javascript:' not in html and "https://docs.nvidia.com/nsight-compute/" in html
    ids = {attrs.get("id") for _, attrs in page.tags}
    assert {"chart-gpu", "chart-kernels", "chart-ranks", "chart-workflow"} <= ids
    assert "straggler" in text and "recorded no workflow" not in text
    assert f"ncu --kernel-name regex:'{EVIL_OP}' python train.py" in text


def test_future_facts_markdown_stays_inert(enriched: Path) -> None:
    markdown = (enriched / "report.md").read_text()
    assert max(len(line) for line in markdown.splitlines() if line.startswith("|")) <= WIDTH
    rendered = GFM.render(markdown)
    assert "<script" not in rendered.replace("&lt;script", "")
    assert not re.search(r"<img (?![^>]*src=\"charts/)", rendered)
    assert "## Tables" in markdown and "### Step time per rank" in markdown and "Straggler: rank 2." in markdown


def test_fail_on_gates_on_severity(diagnosed_examples, tmp_path) -> None:
    from advisor.engine.schema import SEVERITIES

    run = tmp_path / "run"
    shutil.copytree(diagnosed_examples["slow_dataloader"].path, run)
    worst = max(SEVERITIES.index(d["severity"]) for d in diagnosed_examples["slow_dataloader"].diagnoses)
    # the severity of DL001 depends on the data-loading share this machine measured: gate on what is there
    assert run_cli("report", str(run), "--fail-on", SEVERITIES[worst], "-q", cwd=tmp_path).code == 1
    assert run_cli("report", str(run), "--fail-on", "info", "-q", cwd=tmp_path).code == 1
    if worst + 1 < len(SEVERITIES):
        assert run_cli("report", str(run), "--fail-on", SEVERITIES[worst + 1], "-q", cwd=tmp_path).code == 0
    assert run_cli("report", str(run), "-q", cwd=tmp_path).code == 0


def test_after_fix_command_puts_out_among_advisor_options() -> None:
    """``--out`` after the script's arguments would be handed to the script, whose parser fails on it."""
    from advisor.report.model import _advisor_command

    meta = {"command": ["advisor", "diagnose", "train.py", "--out", "runs/a", "--", "--lr", "0.1", "--out", "ckpt"]}
    assert _advisor_command(meta) == "advisor diagnose train.py -- --lr 0.1 --out ckpt"
    assert (_advisor_command(meta, out="/runs/a b-after")
            == "advisor diagnose train.py --out '/runs/a b-after' -- --lr 0.1 --out ckpt")
    plain = {"command": ["advisor", "diagnose", "train.py", "--out=runs/a", "--no-escalate"]}
    assert _advisor_command(plain, out="runs/a-after") == "advisor diagnose train.py --no-escalate --out runs/a-after"
