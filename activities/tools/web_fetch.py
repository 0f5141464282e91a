"""WebFetch: a page fetched (same-host redirects followed, 15 minutes cached), turned into
markdown, and a small, fast model's answer to the prompt about it."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import anthropic
import httpx2

from activities.tools.base import ToolError, ToolOutput, Workspace
from activities.tools.environment import SETTINGS_ENV
from activities.tools.web_page import charset_of, cut_content, decode, html_to_markdown, kind_of
from durable_agent.engine.permissions import Behavior, PermissionContext, check
from durable_agent.engine.tools import ToolName, WebFetchInput

ModelClient = Callable[[], Awaitable[anthropic.AsyncAnthropic]]
"""The worker's Messages API client (its key, its base URL), as the model activity holds it."""

FETCH_TIMEOUT_SECONDS = 30.0
"""For the whole fetch, redirects included."""
MAX_PAGE_BYTES = 10 << 20
"""Reading stops here; the page is cut."""
MAX_REDIRECTS = 10
MODEL_MAX_TOKENS = 1024
MODEL_TIMEOUT_SECONDS = 120.0
MODEL_RETRIES = 2
"""The worker's client retries nothing (Temporal does); this one call retries a blip itself."""
DEFAULT_SMALL_MODEL = "claude-haiku-4-5"
USER_AGENT = "durable-agent/0.1 (WebFetch tool)"
ACCEPT = "text/markdown, text/html;q=0.9, text/plain;q=0.8, */*;q=0.5"
REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class Body:
    """A response as read: at most MAX_PAGE_BYTES of it (`cut` when there was more)."""

    url: str
    mime: str
    charset: str | None
    data: bytes
    cut: bool


@dataclass(frozen=True)
class Page:
    """A fetched page as the small model reads it."""

    url: str
    """Where it was fetched from, after same-host redirects."""
    content: str
    """Markdown (from HTML) or the text as served, cut to MAX_CONTENT_CHARS."""


class PageCache:
    """Fetched pages by requested URL, for `ttl` seconds: another question about a page asked
    soon after reads it from here. The least recently used go first beyond the bounds."""

    def __init__(
        self,
        ttl: float = 15 * 60,
        max_entries: int = 50,
        max_chars: int = 50 << 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl, self.max_entries, self.max_chars, self.clock = ttl, max_entries, max_chars, clock
        self._pages: OrderedDict[str, tuple[float, Page]] = OrderedDict()

    def get(self, url: str) -> Page | None:
        found = self._pages.get(url)
        if found is None:
            return None
        if self.clock() - found[0] > self.ttl:
            del self._pages[url]
            return None
        self._pages.move_to_end(url)
        return found[1]

    def put(self, url: str, page: Page) -> None:
        self._pages[url] = (self.clock(), page)
        self._pages.move_to_end(url)
        while len(self._pages) > self.max_entries or self._chars() > self.max_chars:
            self._pages.popitem(last=False)

    def clear(self) -> None:
        self._pages.clear()

    def _chars(self) -> int:
        return sum(len(page.content) for _, page in self._pages.values())


PAGE_CACHE = PageCache()
"""This worker process's cache (activities share the event loop: no lock needed)."""


async def run_web_fetch_alone(args: WebFetchInput, ws: Workspace) -> ToolOutput:
    """WebFetch where no model client was given (`execute_tool` passes the worker's)."""
    return await run_web_fetch(args, None)


async def run_web_fetch(
    args: WebFetchInput, client: ModelClient | None, permissions: PermissionContext | None = None
) -> ToolOutput:
    """Fetch `args.url` (or take it from the cache) and ask the small model `args.prompt`.
    With `permissions`, a same-host redirect is refused where a deny rule covers its target."""
    if client is None:
        raise ToolError("WebFetch is not available: this worker has no model client")
    url = upgraded(args.url)
    page = PAGE_CACHE.get(url)
    if page is None:
        fetched = await fetch_page(url, permissions)
        if isinstance(fetched, ToolOutput):  # a redirect to another host
            return fetched
        page = fetched
        PAGE_CACHE.put(url, page)
    return await ask_small_model(await client(), page, args.prompt)


def upgraded(url: str) -> str:
    """https for http, except on this machine (a local server rarely speaks TLS)."""
    parts = urlsplit(url)
    if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
        return parts._replace(scheme="https").geturl()
    return url


def is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def same_site(origin: str, target: str) -> bool:
    """A redirect that may be followed: same host (give or take `www.`), port and scheme (or
    http to https), no credentials."""
    a, b = urlsplit(origin), urlsplit(target)
    if b.username is not None or b.password is not None or a.port != b.port:
        return False
    if (a.scheme, b.scheme) not in {("http", "http"), ("https", "https"), ("http", "https")}:
        return False
    bare = [(p.hostname or "").removeprefix("www.") for p in (a, b)]
    return bool(bare[0]) and bare[0] == bare[1]


async def fetch_page(url: str, permissions: PermissionContext | None) -> Page | ToolOutput:
    """The page at `url`, or (not an error) where it redirects when that is another host;
    ToolError for anything that leaves no page to read."""
    fetched = await fetch_body(url, permissions)
    if isinstance(fetched, ToolOutput):
        return fetched
    kind = kind_of(fetched.mime, fetched.data[:1024])
    if kind == "binary":
        raise ToolError(_binary_message(fetched.url, fetched.mime or "not text"))
    if kind == "html":  # off the loop, and outside the fetch's timeout: it takes a while
        content = await asyncio.to_thread(
            html_to_markdown, fetched.data, fetched.url, fetched.charset
        )
    else:
        content = decode(fetched.data, fetched.charset)
    if fetched.cut:
        content += f"\n\n[The page was cut at {MAX_PAGE_BYTES >> 20} MB.]"
    return Page(url=fetched.url, content=cut_content(content))


async def fetch_body(url: str, permissions: PermissionContext | None) -> Body | ToolOutput:
    """The response at `url` once same-host redirects are followed, or the redirect notice."""
    try:
        async with asyncio.timeout(FETCH_TIMEOUT_SECONDS):
            http = await asyncio.to_thread(_http_client)  # loading TLS roots takes a while
            async with http:
                return await _follow(http, url, permissions)
    except TimeoutError as exc:
        raise ToolError(
            f"WebFetch: {url} did not answer within {FETCH_TIMEOUT_SECONDS:g} s"
        ) from exc
    except httpx2.TimeoutException as exc:
        raise ToolError(f"WebFetch: {url} did not answer in time ({type(exc).__name__})") from exc
    except httpx2.HTTPError as exc:
        raise ToolError(f"WebFetch could not fetch {url}: {type(exc).__name__}: {exc}") from exc


def _http_client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        timeout=FETCH_TIMEOUT_SECONDS,
        follow_redirects=False,
        headers={"user-agent": USER_AGENT, "accept": ACCEPT},
    )


async def _follow(
    http: httpx2.AsyncClient, url: str, permissions: PermissionContext | None
) -> Body | ToolOutput:
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        async with http.stream("GET", current) as response:
            location = response.headers.get("location")
            if response.status_code in REDIRECTS and location:
                target = urljoin(current, location)
                if not same_site(current, target):
                    return redirect_notice(url, target, response.status_code)
                _refuse_denied(target, permissions)
                current = upgraded(target)
                continue
            if response.status_code >= 400:
                raise ToolError(
                    f"WebFetch: {current} answered HTTP {response.status_code} "
                    f"{response.reason_phrase}".rstrip()
                )
            return await _read_body(response, current)
    raise ToolError(f"WebFetch: {url} redirected more than {MAX_REDIRECTS} times")


def _refuse_denied(target: str, permissions: PermissionContext | None) -> None:
    if permissions is None:
        return
    decision = check(ToolName.WEB_FETCH, {"url": target}, permissions)
    if decision.behavior == Behavior.DENY:
        raise ToolError(f"WebFetch was redirected to {target}: {decision.reason}")


def redirect_notice(url: str, target: str, status: int) -> ToolOutput:
    """What the model reads of a redirect to another host: it was not followed, and how to."""
    return ToolOutput(
        f"{url} redirects (HTTP {status}) to another host, which WebFetch does not follow "
        f"on its own.\nRedirect URL: {target}\nTo read the page there, call WebFetch again "
        "with this URL as `url` (and the same prompt)."
    )


async def _read_body(response: httpx2.Response, url: str) -> Body:
    mime, _, params = response.headers.get("content-type", "").partition(";")
    mime = mime.strip().lower()
    if mime and kind_of(mime, b"") == "binary":  # refused before any of it is read
        raise ToolError(_binary_message(url, mime))
    data, cut = bytearray(), False
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) >= MAX_PAGE_BYTES:
            cut = len(data) > MAX_PAGE_BYTES
            del data[MAX_PAGE_BYTES:]
            break
    return Body(url, mime, charset_of(params), bytes(data), cut)


def _binary_message(url: str, mime: str) -> str:
    return (
        f"WebFetch cannot read {url}: its content is {mime} (binary); "
        "it reads HTML and text pages only"
    )


def small_fast_model() -> str:
    """ANTHROPIC_SMALL_FAST_MODEL, else ANTHROPIC_DEFAULT_HAIKU_MODEL (the settings' `env`
    first, then the worker's environment), else Haiku."""
    settings = SETTINGS_ENV.get() or {}
    for name in ("ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL"):
        value = settings.get(name) or os.environ.get(name)
        if value:
            return value
    return DEFAULT_SMALL_MODEL


def question(page: Page, prompt: str) -> str:
    """The small model's one user message: the page, then what to find in it."""
    return (
        f"Here is the content of the web page {page.url}:\n\n<page>\n{page.content}\n</page>\n\n"
        f"{prompt}\n\n"
        "Answer from the page content above only, concisely. Quote the page sparingly: a "
        "short phrase in quotation marks where the exact words matter, never long passages; "
        "put the rest in your own words. If the page does not say, answer that it does not."
    )


async def ask_small_model(client: anthropic.AsyncAnthropic, page: Page, prompt: str) -> ToolOutput:
    model = small_fast_model()
    try:
        reply = await client.with_options(
            max_retries=MODEL_RETRIES, timeout=MODEL_TIMEOUT_SECONDS
        ).messages.create(
            model=model,
            max_tokens=MODEL_MAX_TOKENS,
            messages=[{"role": "user", "content": question(page, prompt)}],
        )
    except anthropic.AnthropicError as exc:
        return ToolOutput(
            f"WebFetch read {page.url} but the model {model} could not answer: {_failure(exc)}",
            is_error=True,
        )
    text = "".join(b.text for b in reply.content if isinstance(b, anthropic.types.TextBlock))
    return ToolOutput(text.strip() or f"The model {model} gave no answer about {page.url}.")


def _failure(exc: anthropic.AnthropicError) -> str:
    """One line: the API's status, error type and message, else the exception's first line."""
    body = exc.body if isinstance(exc, anthropic.APIStatusError) else None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(exc, anthropic.APIStatusError) and isinstance(error, dict):
        kind, message = error.get("type", ""), error.get("message", "")
        return f"HTTP {exc.status_code} {kind}: {message}"[:300]
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"[:300]
