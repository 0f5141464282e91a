"""Finding Agent Skills, as Claude Code's documentation describes them: a skill is a folder
with a `SKILL.md` whose YAML frontmatter gives its `name` and `description` (and optionally
`allowed-tools`); the markdown after it is what the model is told when it loads the skill.
Project skills are `.claude/skills/<folder>/SKILL.md` in the workspace and each folder above it
up to the repository root (the nearest wins); the user's are in their Claude folder's `skills`
(`$CLAUDE_CONFIG_DIR/skills`, else `~/.claude/skills`). A project skill wins over a user skill
of the same name.

The CLI discovers them where the session starts and the listing goes in the session's config
(engine/skills.py); the Skill tool reads the chosen one again when the model loads it (it may
have changed). Blocking file I/O; a bad skill is skipped with one line saying why, never an
exception."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import frontmatter
from frontmatter.default_handlers import YAMLHandler

from durable_agent.engine.memory import repository_root
from durable_agent.engine.skills import (
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
    MAX_SKILLS,
    SkillInfo,
    SkillSource,
)
from durable_agent.environment import claude_dir, setting_sources

SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 256 * 1024
"""A larger SKILL.md is skipped: its body would crowd out the conversation (put reference
material in files beside it, which the model reads as it needs them)."""
MAX_REASON_CHARS = 200
ALL_SOURCES = frozenset(("user", "project", "local"))
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


@dataclass(frozen=True)
class Skipped:
    """A SKILL.md that is not offered to the model, and why."""

    path: str
    reason: str

    def warning(self) -> str:
        return f"warning: skill {self.path} skipped: {self.reason}"


@dataclass(frozen=True)
class Skill:
    """A skill read whole: what the model is told of it, and its instructions."""

    info: SkillInfo
    body: str


@dataclass
class Discovery:
    """The skills found (by name) and the files skipped."""

    skills: list[Skill] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def infos(self) -> list[SkillInfo]:
        return [s.info for s in self.skills]

    def warnings(self) -> list[str]:
        return [s.warning() for s in self.skipped]


def skill_folders(
    workspace: Path, user_dir: Path, sources: frozenset[str] = ALL_SOURCES
) -> list[tuple[Path, SkillSource]]:
    """The `skills` folders to look in, first the one that wins: the workspace's, each folder's
    above it up to the repository root (only the workspace's outside a repository), the user's."""
    folders: list[tuple[Path, SkillSource]] = []
    if "project" in sources:
        root = repository_root(workspace) or workspace
        chain = [workspace, *workspace.parents]
        chain = chain[: chain.index(root) + 1] if root in chain else [workspace]
        folders += [(folder / ".claude" / "skills", "project") for folder in chain]
    if "user" in sources:
        folders.append((user_dir / "skills", "user"))
    return folders


def discover(workspace: Path, user_dir: Path, sources: frozenset[str] = ALL_SOURCES) -> Discovery:
    """Every valid skill under the folders of `skill_folders`, by name (at most MAX_SKILLS);
    a folder without SKILL.md is no skill and is passed over in silence."""
    found = Discovery()
    taken: dict[str, Path] = {}
    for folder, source in skill_folders(workspace, user_dir, sources):
        for path in _skill_files(folder, found):
            read = read_skill(path, source)
            if isinstance(read, str):
                found.skipped.append(Skipped(str(path), read))
                continue
            name = read.info.name
            if name not in taken:
                taken[name] = folder
                found.skills.append(read)
            elif taken[name] == folder:  # two folders of one level claim one name: a mistake
                found.skipped.append(Skipped(str(path), f"another skill here is named {name!r}"))
    found.skills.sort(key=lambda s: s.info.name)
    for extra in found.skills[MAX_SKILLS:]:
        found.skipped.append(Skipped(extra.info.path, f"more than {MAX_SKILLS} skills"))
    del found.skills[MAX_SKILLS:]
    return found


def _skill_files(folder: Path, found: Discovery) -> list[Path]:
    try:
        if not folder.is_dir():
            return []
        entries = sorted(folder.iterdir())
    except OSError as exc:
        found.skipped.append(Skipped(str(folder), f"cannot be listed ({exc.strerror or exc})"))
        return []
    files: list[Path] = []
    for entry in entries:
        try:
            if entry.is_dir() and (entry / SKILL_FILE).is_file():
                files.append(entry / SKILL_FILE)
        except OSError:
            continue
    return files


def read_skill(path: Path, source: SkillSource) -> Skill | str:
    """The skill `path` defines, or why it is no valid skill (one line)."""
    try:
        size = path.stat().st_size
        if size > MAX_SKILL_BYTES:
            return f"the file is {size} bytes (at most {MAX_SKILL_BYTES})"
        text = path.read_bytes().decode("utf-8-sig", errors="replace")
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    handler = YAMLHandler()
    if not handler.detect(text):
        return "no YAML frontmatter (the file must start with a --- line)"
    if len(YAMLHandler.FM_BOUNDARY.findall(text)) < 2:
        return "the frontmatter has no closing --- line"
    try:
        post = frontmatter.loads(text, handler=handler)
    except Exception as exc:  # the YAML parser's errors (and any other) are a bad file
        return _one_line(f"the frontmatter is not valid YAML: {exc}")
    return _skill(path, source, post.metadata, post.content)


def _skill(path: Path, source: SkillSource, meta: dict[str, Any], body: str) -> Skill | str:
    name = meta.get("name")
    if name is None:
        return "the frontmatter has no name"
    if not isinstance(name, str) or not _valid_name(name):
        return _one_line(
            f"name {name!r} is not 1-{MAX_NAME_CHARS} lowercase letters, digits and hyphens"
        )
    description = meta.get("description")
    if description is None or (isinstance(description, str) and not description.strip()):
        return "the frontmatter has no description"
    if not isinstance(description, str):
        return _one_line(f"the description {description!r} is not text")
    description = " ".join(description.split())
    if len(description) > MAX_DESCRIPTION_CHARS:
        return f"the description is {len(description)} characters (at most {MAX_DESCRIPTION_CHARS})"
    tools = _allowed_tools(meta.get("allowed-tools"))
    if tools is None:
        return "allowed-tools is neither a list of tools nor a comma-separated string"
    info = SkillInfo(
        name=name, description=description, path=str(path), source=source, allowed_tools=tools
    )
    return Skill(info=info, body=body)


def _valid_name(name: str) -> bool:
    return 1 <= len(name) <= MAX_NAME_CHARS and set(name) <= _NAME_CHARS


def _allowed_tools(raw: object) -> tuple[str, ...] | None:
    if raw is None:
        return ()
    if isinstance(raw, str):
        return tuple(t.strip() for t in raw.split(",") if t.strip())
    if isinstance(raw, list) and all(isinstance(t, str) for t in raw):
        return tuple(t.strip() for t in raw if t.strip())
    return None


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_REASON_CHARS else flat[: MAX_REASON_CHARS - 1] + "…"


def session_skills(workspace: Path, sources: str | None = None) -> Discovery:
    """The skills of a session started in `workspace` (`--setting-sources` chooses the
    levels: `project`, `user`)."""
    return discover(workspace, claude_dir(), setting_sources(sources))
