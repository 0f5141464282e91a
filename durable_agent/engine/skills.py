"""Agent Skills as the model sees them: each skill's name and description, listed in the
`Skill` tool's description, so the model loads one when a task matches it. Finding and reading
the `SKILL.md` files is durable_agent/skills.py's (where the files are)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

SkillSource = Literal["project", "user"]

MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_SKILLS = 100
"""Skills listed to the model at most (the listing is in every request, and in the session's
config, carried across continue-as-new); discovery warns about the rest."""

SKILL_TOOL_INTRO = (
    "Load a skill: a folder of instructions, and sometimes scripts or reference files, for one "
    "kind of task. When the task at hand matches a skill's description below, call this tool "
    "with the skill's name before you start on it; the skill's instructions come back as the "
    "result, and you follow them. Files they mention are in the skill's base directory, named "
    "on the result's first line (read them with Read). Load a skill once: if its instructions "
    "are already in the conversation, use them."
)


class SkillInfo(BaseModel):
    """One skill found where the session started (its SKILL.md is read again when loaded)."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The frontmatter's `name`: what the model passes to the Skill tool."""
    description: str
    """The frontmatter's `description`, whitespace folded to single spaces (at most
    MAX_DESCRIPTION_CHARS)."""
    path: str
    """The SKILL.md file."""
    source: SkillSource
    """`project` (a `.claude/skills` folder of the workspace or a folder above it up to the
    repository root) or `user` (the user's Claude folder's `skills`)."""
    allowed_tools: tuple[str, ...] = ()
    """The frontmatter's `allowed-tools`, as written (recorded, not yet enforced)."""


def skill_listing(skills: Sequence[SkillInfo]) -> str:
    """One `- name: description` line per skill."""
    return "\n".join(f"- {s.name}: {s.description}" for s in skills)


def skill_tool_description(skills: Sequence[SkillInfo]) -> str:
    """The Skill tool's description in a request: what it does, then the skills there are."""
    return f"{SKILL_TOOL_INTRO}\n\nAvailable skills:\n{skill_listing(skills)}"
