"""Finding sub-agent definitions, as Claude Code's documentation describes them: a markdown
file whose YAML frontmatter gives `name`, `description`, optionally `tools` (a comma list;
none: all the parent's) and `model` (haiku, sonnet, opus, inherit or a model id); its body is
the agent's system prompt. Project agents are `.claude/agents/*.md` in the workspace and each
folder above it up to the repository root (the nearest wins); the user's are in their Claude
folder's `agents`; `--agents JSON` (`{"name": {"description": …, "prompt": …, "tools": […],
"model": …}}`) wins over both. Found where the session starts; the list goes in the
session's config (engine/agents.py). A bad file is skipped with one line, never an error."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import frontmatter
from frontmatter.default_handlers import YAMLHandler

from durable_agent.engine.agents import AgentDef, AgentSource
from durable_agent.engine.memory import repository_root
from durable_agent.environment import claude_dir, setting_sources

MAX_AGENT_BYTES = 256 * 1024
MAX_AGENTS = 50
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


class AgentsFlagError(ValueError):
    """`--agents` is not the JSON object it must be (one line)."""


@dataclass
class Agents:
    found: list[AgentDef] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def agent_folders(workspace: Path, user_dir: Path, sources: frozenset[str]) -> list[Path]:
    folders: list[Path] = []
    if "project" in sources:
        root = repository_root(workspace) or workspace
        chain = [workspace, *workspace.parents]
        chain = chain[: chain.index(root) + 1] if root in chain else [workspace]
        folders += [folder / ".claude" / "agents" for folder in chain]
    if "user" in sources:
        folders.append(user_dir / "agents")
    return folders


def _tools(raw: object) -> tuple[str, ...] | None | str:
    """None: all the parent's; a str: why it is not valid."""
    if raw is None:
        return None
    if isinstance(raw, str):
        return tuple(t.strip() for t in raw.split(",") if t.strip())
    if isinstance(raw, list) and all(isinstance(t, str) for t in raw):
        return tuple(t.strip() for t in raw if t.strip())
    return "tools is neither a list of tool names nor a comma-separated string"


def definition(
    meta: dict[str, Any], prompt: str, source: AgentSource, path: str = ""
) -> AgentDef | str:
    """The agent `meta` and `prompt` define, or why they do not (one line)."""
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not name or not set(name) <= _NAME_CHARS or len(name) > 64:
        return f"name {name!r} is not 1-64 lowercase letters, digits, - and _"
    if not isinstance(description, str) or not description.strip():
        return "it has no description"
    tools = _tools(meta.get("tools"))
    if isinstance(tools, str):
        return tools
    model = meta.get("model")
    if model is not None and not isinstance(model, str):
        return f"model {model!r} is not a name"
    return AgentDef(
        name=name,
        description=" ".join(description.split()),
        prompt=prompt.strip(),
        tools=tools,
        model=model,
        source=source,
        path=path,
    )


def read_agent(path: Path, source: AgentSource) -> AgentDef | str:
    try:
        if path.stat().st_size > MAX_AGENT_BYTES:
            return f"the file is over {MAX_AGENT_BYTES} bytes"
        text = path.read_bytes().decode("utf-8-sig", errors="replace")
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not YAMLHandler().detect(text):
        return "no YAML frontmatter (the file must start with a --- line)"
    try:
        post = frontmatter.loads(text)
    except Exception as exc:  # the YAML parser's errors: a bad file
        return " ".join(f"the frontmatter is not valid YAML: {exc}".split())[:200]
    return definition(dict(post.metadata), post.content, source, str(path))


def from_flag(raw: str) -> list[AgentDef]:
    """`--agents JSON`."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise AgentsFlagError(f"--agents is not JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(value, dict):
        raise AgentsFlagError("--agents must be a JSON object: {name: {description, prompt}}")
    out = []
    for name, spec in value.items():
        if not isinstance(spec, dict):
            raise AgentsFlagError(f"--agents: {name!r} must be an object")
        made = definition({**spec, "name": name}, str(spec.get("prompt") or ""), "flag")
        if isinstance(made, str):
            raise AgentsFlagError(f"--agents: {name!r}: {made}")
        out.append(made)
    return out


def session_agents(workspace: Path, flag: str | None = None, sources: str | None = None) -> Agents:
    """The agents of a session started in `workspace`: the flag's, then the project's, then
    the user's (a name taken is kept by the first)."""
    result = Agents()
    taken: set[str] = set()
    candidates: list[AgentDef | tuple[str, str]] = list(from_flag(flag)) if flag else []
    for folder in agent_folders(workspace, claude_dir(), setting_sources(sources)):
        source: AgentSource = "user" if folder == claude_dir() / "agents" else "project"
        try:
            files = sorted(folder.glob("*.md")) if folder.is_dir() else []
        except OSError:
            files = []
        for path in files:
            read = read_agent(path, source)
            candidates.append((str(path), read) if isinstance(read, str) else read)
    for one in candidates:
        if isinstance(one, tuple):
            result.warnings.append(f"warning: agent {one[0]} skipped: {one[1]}")
        elif one.name not in taken and len(result.found) < MAX_AGENTS:
            taken.add(one.name)
            result.found.append(one)
    return result
