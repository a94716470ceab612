"""Static checks on a rendered HTML report: which tags, attributes and links it holds."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "nav", "section", "article", "footer", "h1", "h2",
    "h3", "h4", "p", "a", "span", "strong", "em", "code", "pre", "ul", "ol", "li", "dl", "dt", "dd", "table",
    "thead", "tbody", "tr", "th", "td", "div", "figure", "figcaption", "img", "details", "summary", "br", "blockquote",
}


class Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> Collector:
    collector = Collector()
    collector.feed(html)
    return collector


def assert_inert(html: str) -> Collector:
    """No script or embedding tag, no event handler, no link that could run code or leave the machine unasked."""
    page = parse(html)
    assert "<script" not in html.lower()
    for tag, attrs in page.tags:
        assert tag in ALLOWED_TAGS, tag
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        for key in ("href", "src"):
            url = (attrs.get(key) or "").strip()
            scheme = urlsplit(url).scheme.lower()
            assert scheme in ("", "file", "http", "https", "data"), (tag, url)
            if scheme == "data":
                assert url.startswith("data:image/svg+xml;base64,"), url[:60]
    return page


def local_links(html: str, base: Path) -> list[Path]:
    """The files that relative and file:// links point at."""
    out = []
    for tag, attrs in parse(html).tags:
        url = attrs.get("href") if tag == "a" else None
        if not url or url.startswith("#"):
            continue
        parts = urlsplit(url)
        if parts.scheme == "file":
            out.append(Path(unquote(parts.path)))
        elif not parts.scheme:
            out.append(base / unquote(parts.path))
    return out
