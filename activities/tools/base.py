"""What every tool shares: the workspace boundary, the result type, output truncation."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from durable_agent.engine.messages import ImageBlock, TextBlock, ToolResultBlock

MAX_OUTPUT_CHARS = 30_000
"""Longer output keeps its head and tail around a truncation marker."""


class ToolError(Exception):
    """A failure the model should read as an `is_error` tool_result."""


def no_nul(value: str, field: str) -> None:
    """One error, from every tool, for a NUL byte where a file name goes (no file name can
    hold one, and each OS call would fail in its own words)."""
    if "\x00" in value:
        raise ToolError(f"{field} {value!r} contains a NUL byte, which no file name can hold")


@dataclass(frozen=True)
class ToolOutput:
    content: str
    is_error: bool = False
    blocks: tuple[TextBlock | ImageBlock, ...] = ()
    """The result as content blocks, when it holds more than text (an MCP tool's images);
    `content` is then its text."""

    def result(self, tool_use_id: str) -> ToolResultBlock:
        content = list(self.blocks) if self.blocks else self.content
        return ToolResultBlock(tool_use_id=tool_use_id, content=content, is_error=self.is_error)


@dataclass(frozen=True)
class Workspace:
    """The directory tools are confined to; every path goes through `resolve`."""

    root: Path
    read_roots: tuple[Path, ...] = ()
    """Extra folders Read may open (where whole oversized tool results are kept)."""
    hidden: Callable[[str], bool] | None = None
    """Paths no search may show (a `Read(...)` deny rule covers them), by absolute path."""
    extra_roots: tuple[Path, ...] = ()
    """More folders the tools may work in, as in the workspace (`--add-dir`)."""
    judge: Callable[[str, str], str | None] | None = None
    """Why the call may not use a path that leads elsewhere (given, resolved), or None: the
    permission rules applied to where a symbolic link leads, at the moment it is used."""

    @classmethod
    def open(
        cls,
        raw: str,
        read_roots: tuple[Path, ...] = (),
        hidden: Callable[[str], bool] | None = None,
        extra_roots: tuple[str, ...] = (),
        judge: Callable[[str, str], str | None] | None = None,
    ) -> Workspace:
        root = Path(raw).expanduser().resolve()
        if not root.is_dir():
            raise ToolError(f"workspace {raw} is not a directory")
        real = tuple(Path(os.path.realpath(r)) for r in read_roots)
        extra = tuple(Path(os.path.realpath(r)) for r in extra_roots)
        return cls(root, real, hidden, extra, judge)

    def _inside(self, real: Path) -> bool:
        return any(real == r or real.is_relative_to(r) for r in (self.root, *self.extra_roots))

    def resolve_readable(self, raw: str) -> Path:
        """Like `resolve`, but also inside the extra read-only roots."""
        no_nul(raw, "path")
        candidate = Path(os.path.realpath(Path(raw).expanduser()))
        if Path(raw).is_absolute() and any(candidate.is_relative_to(r) for r in self.read_roots):
            return candidate
        return self.resolve(raw)

    def resolve(self, raw: str) -> Path:
        """Absolute path inside the workspace; `..` or symlinks that leave it are refused, and
        so is a link to where the permission rules would not let the call go (`judge`)."""
        return self._resolved(raw)[1]

    def resolve_writable(self, raw: str) -> Path:
        """Like `resolve`, for writing: a path that is itself a symbolic link is refused, naming
        its target (as Claude Code does); a link in a folder above it is judged by `resolve`."""
        resolved = self.resolve(raw)
        if os.path.islink(self._absolute(raw)):  # as written: the kernel reads `link/..`
            raise ToolError(
                f"Refusing to write {raw}: it is a symbolic link to {resolved}; "
                f"name {self.display(resolved)} itself if that file is meant"
            )
        return resolved

    def _absolute(self, raw: str) -> Path:
        candidate = Path(raw).expanduser()
        return candidate if candidate.is_absolute() else self.root / candidate

    def _resolved(self, raw: str) -> tuple[str, Path]:
        """The path as given (absolute, normalised as the permission rules read it) and
        with every link followed."""
        no_nul(raw, "path")
        candidate = self._absolute(raw)
        given = "/" + os.path.normpath(candidate).lstrip("/")
        resolved = Path(os.path.realpath(candidate))
        if not self._inside(resolved):
            raise ToolError(f"path {raw} is outside the workspace {self.root}; access refused")
        if self.judge is not None and (refusal := self.judge(given, str(resolved))) is not None:
            raise ToolError(refusal)
        return given, resolved

    def real_inside(self, path: Path | str) -> Path | None:
        """`path` with every symlink followed, or None when that lands outside the workspace
        or when the path (as given, or where it lands) is hidden.

        Never raises: a dangling link resolves to where it points, which callers then
        fail to open. Search tools use it on every entry they would read or list.
        """
        try:
            real = Path(os.path.realpath(path))
        except (OSError, ValueError):
            return None
        if not self._inside(real):
            return None
        if self.hidden is not None and (
            self.hidden(os.path.abspath(path)) or self.hidden(str(real))
        ):
            return None
        return real

    def display(self, path: Path) -> str:
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            return str(path)
        return str(rel) if str(rel) != "." else "."


def truncate(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n\n[... {cut} characters truncated ...]\n\n{text[-half:]}"
