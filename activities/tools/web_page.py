"""What WebFetch makes of a response's bytes: markdown from HTML, other text as served, and
binary content told apart (by its declared type, else by its first bytes)."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urljoin

from bs4 import BeautifulSoup
from markdownify import MarkdownConverter

MAX_CONTENT_CHARS = 100_000
"""What the small model reads of a page at most."""
MAX_HTML_BYTES = 2 << 20
"""What of a page's HTML (its scripts, styles and comments taken out) becomes markdown: more
would be cut at MAX_CONTENT_CHARS anyway, and the parser takes seconds a megabyte."""
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset(
    {"application/json", "application/xml", "application/javascript", "application/x-yaml",
     "application/yaml", "application/toml", "application/x-sh", "application/rss+xml"}
)  # fmt: skip
DROPPED_TAGS = ["head", "script", "style", "noscript", "template", "iframe", "svg", "canvas"]
"""Never page text: code, styling, embedded documents (the title is kept apart)."""

Kind = Literal["html", "text", "binary"]

_RAW_TEXT = re.compile(rb"<(script|style)\b|<!--")
"""Where an element starts whose content is never text; it ends at its closing tag."""
_CLOSING = {b"script": b"</script", b"style": b"</style"}


def kind_of(mime: str, head: bytes) -> Kind:
    """HTML, other text, or binary; by the declared type, else by the first bytes."""
    if mime in HTML_TYPES:
        return "html"
    if mime.startswith("text/") or mime in TEXT_TYPES or mime.endswith(("+json", "+xml")):
        return "text"
    if mime or b"\x00" in head:
        return "binary"
    if head.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
        return "html"
    return "text"


def charset_of(params: str) -> str | None:
    """The charset a content-type's parameters name, if any."""
    found = re.search(r"charset\s*=\s*\"?([\w.:-]+)", params, re.IGNORECASE)
    return found.group(1) if found else None


def decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")


def html_to_markdown(html: bytes | str, base_url: str = "", charset: str | None = None) -> str:
    """The page's text as markdown: its title first, links made absolute, and no script,
    style or other non-text element (blocking: a big page takes a while). Without `charset`,
    bytes are read as their `<meta charset>` says, else as detected."""
    if isinstance(html, bytes):
        html = without_raw_text(html)[:MAX_HTML_BYTES]
    soup = BeautifulSoup(
        html, "html.parser", from_encoding=charset if isinstance(html, bytes) else None
    )
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for dropped in soup(DROPPED_TAGS):
        dropped.decompose()
    for name, attr in (("a", "href"), ("img", "src")):
        for element in soup.find_all(name) if base_url else ():
            value = element.get(attr)
            if isinstance(value, str):
                element[attr] = urljoin(base_url, value)
    body = MarkdownConverter(heading_style="ATX", bullets="-").convert_soup(soup)
    body = re.sub(r"\n{3,}", "\n\n", body).strip()
    return f"Title: {title}\n\n{body}" if title else body


def without_raw_text(html: bytes) -> bytes:
    """`html` without its scripts, styles and comments (often most of a page), in one pass."""
    lower = html.lower()
    kept, at = [], 0
    while (start := _RAW_TEXT.search(lower, at)) is not None:
        kept.append(html[at : start.start()])
        closing = _CLOSING.get(start.group(1) or b"", b"-->")
        end = lower.find(closing, start.end())
        if end < 0:  # never closed: the rest is inside it
            return b"".join(kept)
        end = lower.find(b">", end + len(closing) - 1)
        at = len(html) if end < 0 else end + 1
    kept.append(html[at:])
    return b"".join(kept)


def cut_content(text: str, limit: int = MAX_CONTENT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n\n[The page is longer: only its first {limit} characters are here.]"
