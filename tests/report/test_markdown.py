"""Markdown stays inert (nothing from a trace becomes markup) and its tables stay within the page width."""

from __future__ import annotations

from markdown_it import MarkdownIt

from advisor.report.markdown import WIDTH, md_code, md_table, md_text

HOSTILE = [
    "<script>alert(1)</script>",
    "void at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>, at::detail::Array<char*, 2> >(int, T&&)",
    'we"ird \'path\' & <b>bold</b>.py',
    "__getitem__ *star* [link](javascript:alert(1)) `tick` | pipe &amp;",
]
GFM = MarkdownIt("commonmark", {"html": True}).enable("table")  # html on: as permissive as a code host


def test_text_from_traces_renders_literally() -> None:
    for text in HOSTILE:
        html = GFM.render(md_text(text))
        assert "<script" not in html and "<b>" not in html and "<em>" not in html and "<strong>" not in html
        assert "<a " not in html and "<code>" not in html
        # what the reader sees is the original text
        visible = html.replace("<p>", "").replace("</p>", "").strip()
        assert visible.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&") == text


def test_names_as_code_spans_keep_every_character() -> None:
    for text in HOSTILE + ["a `b` c", "``double``"]:
        html = GFM.render(md_code(text))
        assert html.count("<code>") == 1 and "<script" not in html


def test_table_rows_fit_the_width_and_render_as_a_table() -> None:
    rows = [{"name": text, "ms": 12.5 * i, "share": 0.1 * i, "site": f"train.py:{i} (main)"} for i, text in enumerate(HOSTILE)]
    table = md_table(rows, [("Kernel", "name", "code"), ("Per step", "ms", "ms"), ("Share", "share", "pct"),
                            ("Called from", "site", "code")])
    lines = table.splitlines()
    assert all(len(line) <= WIDTH for line in lines), max(len(line) for line in lines)
    assert len({len(line) for line in lines}) == 1  # a padded grid, readable as plain text
    html = GFM.render(table)
    assert html.count("<tr>") == len(rows) + 1 and "<script" not in html
    assert "12.5 ms" in html and "train.py:1 (main)" in html


def test_a_table_that_cannot_shrink_is_left_whole() -> None:
    table = md_table([{"a": 1.0}], [("A very long header for one number", "a", "ms")], width=20)
    assert "1.0 ms" in table
