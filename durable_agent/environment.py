"""The environment block's facts, gathered once where the session is submitted — the machine
that holds the workspace and its `.git` (a fleet's workers get a copy without it) — and carried
in the session's config, so every model call of every prompt sends the same block (the prompt
cache holds) and the workflow never reads a clock or a file for it."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

from durable_agent.engine.memory import MemoryFile
from durable_agent.engine.prompt import STATUS_LINES, Environment, GitContext

GIT_SECONDS = 5.0
COMMIT_CHARS = 160
"""A commit's line in the block is cut here (some subjects are paragraphs)."""


def _git(workspace: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(workspace), "--no-pager", *args], capture_output=True, text=True,
            timeout=GIT_SECONDS, stdin=subprocess.DEVNULL, env={"GIT_OPTIONAL_LOCKS": "0",
            "PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"},
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.rstrip() if done.returncode == 0 else None


def git_context(workspace: Path) -> GitContext | None:
    """Branch, main branch, short status and the last 5 commits; None outside a repository
    (or without git)."""
    if _git(workspace, "rev-parse", "--is-inside-work-tree") != "true":
        return None
    branch = _git(workspace, "branch", "--show-current") or ""
    main = _git(workspace, "symbolic-ref", "--short", "refs/remotes/origin/HEAD") or ""
    main = main.removeprefix("origin/")
    if not main:
        local = set((_git(workspace, "branch", "--format=%(refname:short)") or "").split())
        main = next((b for b in ("main", "master") if b in local), "")
    status = (_git(workspace, "status", "--short") or "").splitlines()
    if len(status) > STATUS_LINES:
        status = [*status[:STATUS_LINES], f"… and {len(status) - STATUS_LINES} more"]
    log = (_git(workspace, "log", "--oneline", "-5") or "").splitlines()
    commits = [c if len(c) <= COMMIT_CHARS else c[: COMMIT_CHARS - 1] + "…" for c in log]
    return GitContext(
        branch=branch, main_branch=main, status="\n".join(status), recent_commits=commits
    )


def gather(workspace: Path) -> Environment:
    """The facts of `workspace` and this machine now (blocking: a few git commands)."""
    return Environment(
        working_directory=str(workspace),
        platform=platform.system().lower(),
        os_version=f"{platform.system()} {platform.release()}",
        today=datetime.date.today().isoformat(),
        git=git_context(workspace),
    )


def claude_dir() -> Path:
    """The user's Claude Code folder: $CLAUDE_CONFIG_DIR, else ~/.claude."""
    raw = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(raw).expanduser() if raw else Path.home() / ".claude"


def memory(workspace: Path, sources: str | None = None) -> str:
    """The memory files' text for a session in `workspace` (`--setting-sources` chooses the
    levels: user, project, local; default all)."""
    from durable_agent.engine.memory import memory_text

    return memory_text(memory_files(workspace, sources))


def memory_files(workspace: Path, sources: str | None = None) -> list[MemoryFile]:
    """The memory files of a session in `workspace`, their imports expanded."""
    from durable_agent.engine.memory import load_memory

    return load_memory(workspace, Path.home(), setting_sources(sources), claude_dir())


def memory_stamps(workspace: Path, files: list[MemoryFile]) -> dict[str, str]:
    """The stamps of those inside the workspace (where the tools can look at them again)."""
    from durable_agent.stamps import stamp

    root = workspace.resolve()
    stamps = {}
    for one in files:
        path = Path(one.path)
        if path.resolve().is_relative_to(root) and (now := stamp(path)) is not None:
            stamps[one.path] = now
    return stamps


def setting_sources(raw: str | None) -> frozenset[str]:
    """`--setting-sources` (user, project, local; default all) as a set."""
    return frozenset(s.strip() for s in (raw or "user,project,local").split(",") if s.strip())
