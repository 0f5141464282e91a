"""Skill: the instructions of one Agent Skill, read from its SKILL.md now (it may have changed
since the session listed it), after a line naming the folder its other files are in.

The skills are looked up again here, in the workspace's folders and the user's Claude folder as
this worker sees them (durable_agent/skills.py), rather than carried in from the listing: a
name the model passes is only ever matched against files that are skills now."""

from __future__ import annotations

from pathlib import Path

from activities.tools.base import ToolError, ToolOutput, Workspace
from activities.transcript import off_loop
from durable_agent.engine.skills import SkillInfo
from durable_agent.engine.tools import SkillInput
from durable_agent.environment import claude_dir
from durable_agent.skills import Skipped, discover

MAX_BODY_CHARS = 100_000
"""A SKILL.md's instructions are cut here (reference material belongs in files beside it)."""


async def run_skill(args: SkillInput, ws: Workspace) -> ToolOutput:
    return await off_loop(_load, args.skill.strip(), ws.root)


def _load(name: str, workspace: Path) -> ToolOutput:
    found = discover(workspace, claude_dir())
    skill = next((s for s in found.skills if s.info.name == name), None)
    if skill is None:
        raise ToolError(_unknown(name, found.infos(), found.skipped))
    body = skill.body.strip()
    if len(body) > MAX_BODY_CHARS:
        body = body[:MAX_BODY_CHARS] + "\n[… the rest of SKILL.md was cut]"
    base = Path(skill.info.path).parent
    return ToolOutput(f"Base directory for this skill: {base}\n\n{body}")


def _unknown(name: str, known: list[SkillInfo], skipped: list[Skipped]) -> str:
    why = next((s for s in skipped if Path(s.path).parent.name == name), None)
    if why is not None:  # its folder is there, its SKILL.md is not a valid skill (now)
        head = f"Skill {name!r} could not be loaded: {why.path}: {why.reason}."
    else:
        head = f"Unknown skill {name!r}."
    names = ", ".join(s.name for s in known)
    return f"{head} Available skills: {names}" if names else f"{head} No skills are available."
