"""Agent Skills (issue 24 item 3): `.claude/skills/*/SKILL.md` of the project and the user's,
frontmatter parsed by python-frontmatter, listed to the model in the Skill tool's description,
loaded by the `Skill` tool; every bad skill skipped with a one-line warning naming its file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from activities.tools import execute_tool
from durable_agent.engine.permissions import (
    Behavior,
    PermissionContext,
    PermissionMode,
    PermissionRules,
    check,
    parse_rule,
)
from durable_agent.engine.request import ModelRequest, build_request
from durable_agent.engine.skills import MAX_DESCRIPTION_CHARS, SkillInfo
from durable_agent.engine.state import ModelCallConfig
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.skills import discover, read_skill, session_skills
from tests.test_cli import cli_env, durable_agent


def skill(
    folder: Path,
    name: str,
    description: str = "",
    body: str = "",
    dirname: str | None = None,
    **extra: Any,
) -> Path:
    """`folder/<dirname or name>/SKILL.md` with that frontmatter and body."""
    meta = {"name": name, "description": description or f"Use for {name} tasks", **extra}
    lines = [f"{k.replace('_', '-')}: {json.dumps(v)}" for k, v in meta.items()]
    return write(
        folder / (dirname or name) / "SKILL.md",
        "---\n" + "\n".join(lines) + "\n---\n" + (body or f"# {name}\nDo the {name} thing."),
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A repository with the workspace two folders down, and the user's Claude folder (the
    CLAUDE_CONFIG_DIR conftest sets)."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    ws = root / "services" / "api"
    ws.mkdir(parents=True)
    return root, ws, Path(os.environ["CLAUDE_CONFIG_DIR"])


def project(folder: Path) -> Path:
    return folder / ".claude" / "skills"


def test_project_and_user_skills_are_found_and_the_project_wins(places, tmp_path):
    root, ws, user = places
    skill(project(ws), "lint", "Lint the API", allowed_tools="Read, Bash(ruff check:*)")
    skill(project(root), "deploy", "Deploy it")
    skill(project(root), "lint", "The root's lint (the workspace's is nearer)")
    skill(user / "skills", "deploy", "My own deploy (the project's wins)")
    skill(user / "skills", "notes", "Keep notes", allowed_tools=["Read", "Write"])
    skill(project(tmp_path), "above", "Above the repository: not read")
    (project(ws) / "no-skill-md").mkdir()  # a folder without SKILL.md is no skill, in silence
    write(project(ws) / "notes.md", "a stray file")
    found = discover(ws, user)
    assert [(s.name, s.source, s.description) for s in found.infos()] == [
        ("deploy", "project", "Deploy it"),
        ("lint", "project", "Lint the API"),
        ("notes", "user", "Keep notes"),
    ]
    by_name = {s.name: s for s in found.infos()}
    assert by_name["lint"].allowed_tools == ("Read", "Bash(ruff check:*)")
    assert by_name["notes"].allowed_tools == ("Read", "Write")
    assert by_name["lint"].path == str(project(ws) / "lint" / "SKILL.md")
    assert found.skipped == []


def test_setting_sources_choose_the_levels(places):
    root, ws, user = places
    skill(project(root), "team", "The team's")
    skill(user / "skills", "mine", "Mine")
    names = {
        raw: [s.name for s in session_skills(ws, raw).infos()]
        for raw in (None, "project", "user", "local", "user,project")
    }
    assert names == {
        None: ["mine", "team"],
        "project": ["team"],
        "user": ["mine"],
        "local": [],
        "user,project": ["mine", "team"],
    }


def test_outside_a_repository_only_the_workspace_is_looked_in(tmp_path):
    ws = tmp_path / "plain" / "ws"
    skill(project(ws), "here", "Here")
    skill(project(ws.parent), "parent", "Not without a repository")
    assert [s.name for s in discover(ws, tmp_path / "nobody").infos()] == ["here"]


BAD = {
    "no frontmatter": ("# just markdown\n", "no YAML frontmatter"),
    "unclosed": ("---\nname: x\ndescription: y\n", "no closing --- line"),
    "yaml error": ("---\nname: [x\ndescription: y\n---\nbody", "not valid YAML"),
    "no name": ("---\ndescription: y\n---\nbody", "has no name"),
    "no description": ("---\nname: x\n---\nbody", "has no description"),
    "empty description": ('---\nname: x\ndescription: "  "\n---\nbody', "has no description"),
    "description not text": ("---\nname: x\ndescription: [1, 2]\n---\n", "is not text"),
    "capitals": ("---\nname: My_Skill\ndescription: y\n---\n", "'My_Skill' is not 1-64"),
    "too long a name": (f"---\nname: {'a' * 65}\ndescription: y\n---\n", "is not 1-64"),
    "a number": ("---\nname: 12\ndescription: y\n---\n", "name 12 is not"),
    "long description": (
        f"---\nname: x\ndescription: {'d' * (MAX_DESCRIPTION_CHARS + 1)}\n---\n",
        f"is {MAX_DESCRIPTION_CHARS + 1} characters",
    ),
    "allowed-tools a mapping": (
        "---\nname: x\ndescription: y\nallowed-tools: {a: b}\n---\n",
        "allowed-tools is neither",
    ),
    "a list as frontmatter": ("---\n- a\n- b\n---\nbody", "has no name"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_skill_is_skipped_with_one_line_naming_its_file(places, case):
    _, ws, user = places
    text, why = BAD[case]
    bad = write(project(ws) / "bad" / "SKILL.md", text)
    skill(project(ws), "good")
    found = discover(ws, user)
    assert [s.name for s in found.infos()] == ["good"]
    (warning,) = found.warnings()
    assert warning.startswith(f"warning: skill {bad} skipped: ") and why in warning, warning
    assert "\n" not in warning and "Traceback" not in warning


def test_unreadable_files_and_odd_bytes_are_skipped_or_read_without_failing(places):
    _, ws, user = places
    big = write(project(ws) / "big" / "SKILL.md", "---\nname: big\ndescription: y\n---\n")
    with big.open("a") as f:
        f.write("x" * 300_000)
    odd = write(project(ws) / "odd" / "SKILL.md", "")
    odd.write_bytes(b"\xef\xbb\xbf---\nname: odd\ndescription: caf\xe9\n---\nbody \xff\n")
    found = discover(ws, user)
    assert [s.name for s in found.infos()] == ["odd"]  # a BOM and bad bytes are no error
    assert "bytes (at most" in found.warnings()[0]
    assert isinstance(read_skill(project(ws) / "gone" / "SKILL.md", "project"), str)


def test_two_skills_of_one_folder_with_one_name_warn(places):
    _, ws, user = places
    skill(project(ws), "twin", dirname="a")
    second = skill(project(ws), "twin", dirname="b")
    found = discover(ws, user)
    assert [s.name for s in found.infos()] == ["twin"]
    assert found.warnings() == [
        f"warning: skill {second} skipped: another skill here is named 'twin'"
    ]


async def test_the_skill_tool_returns_the_body_after_its_base_directory(places):
    _, ws, user = places
    path = skill(project(ws), "pdf", body="# PDF\nRun scripts/fill.py; see forms.md.")
    write(path.parent / "forms.md", "form notes")
    out = await execute_tool("Skill", {"skill": "pdf"}, str(ws))
    assert not out.is_error, out.content
    first, rest = out.content.split("\n", 1)
    assert first == f"Base directory for this skill: {path.parent}"
    assert rest.strip() == "# PDF\nRun scripts/fill.py; see forms.md."
    assert "name:" not in out.content  # the frontmatter is not part of it
    path.write_text(path.read_text().replace("Run scripts", "Now run scripts"))
    again = await execute_tool("Skill", {"skill": "pdf"}, str(ws))
    assert "Now run scripts/fill.py" in again.content  # read when loaded, not when listed
    skill(user / "skills", "mine", body="user instructions")
    mine = await execute_tool("Skill", {"skill": "mine"}, str(ws))
    assert (
        mine.content.endswith("user instructions") and str(user / "skills" / "mine") in mine.content
    )


async def test_unknown_deleted_broken_and_malformed_calls_are_errors(places):
    _, ws, user = places
    path = skill(project(ws), "alpha")
    skill(user / "skills", "beta")
    unknown = await execute_tool("Skill", {"skill": "gamma"}, str(ws))
    assert unknown.is_error
    assert unknown.content == "Unknown skill 'gamma'. Available skills: alpha, beta"
    path.unlink()  # deleted since the session listed it
    gone = await execute_tool("Skill", {"skill": "alpha"}, str(ws))
    assert gone.is_error and gone.content == "Unknown skill 'alpha'. Available skills: beta"
    path.write_text("---\nname: alpha\n---\nno description now")
    broken = await execute_tool("Skill", {"skill": "alpha"}, str(ws))
    assert broken.is_error and "could not be loaded" in broken.content
    assert "has no description" in broken.content and str(path) in broken.content
    bad = await execute_tool("Skill", {"name": "beta"}, str(ws))
    assert bad.is_error and bad.content.startswith("InputValidationError: Skill input")
    (user / "skills" / "beta" / "SKILL.md").unlink()
    none = await execute_tool("Skill", {"skill": "beta"}, str(ws))
    assert none.content.endswith("No skills are available.")


INFO = SkillInfo(name="pdf", description="Fill PDF forms", path="/s/pdf/SKILL.md", source="user")


def test_a_request_lists_the_skills_in_the_skill_tool_and_sends_none_without(tmp_path):
    tools = ModelCallConfig().tools
    assert "Skill" in tools
    req = ModelRequest(model="m", max_tokens=10)
    without = build_request([], "sys", tools, req)[0]["tools"]
    assert "Skill" not in [t["name"] for t in without]
    other = SkillInfo(name="lint", description="Lint", path="/p/lint/SKILL.md", source="project")
    sent = build_request([], "sys", tools, req, skills=[INFO, other])[0]["tools"]
    (tool,) = [t for t in sent if t["name"] == "Skill"]
    assert tool["description"].endswith("\n- pdf: Fill PDF forms\n- lint: Lint")
    assert tool["input_schema"]["required"] == ["skill"]
    assert [t["name"] for t in sent if t["name"] != "Skill"] == [t["name"] for t in without]
    narrowed = build_request([], "sys", ("Read",), req, skills=[INFO])[0]["tools"]
    assert [t["name"] for t in narrowed] == ["Read"]  # `--tools Read` leaves it out
    assert ModelCallConfig.model_validate({"memory": "m"}).skills == []  # old configs load


def ctx(
    tmp_path: Path, *deny: str, mode: PermissionMode = PermissionMode.DEFAULT
) -> PermissionContext:
    rules = PermissionRules(deny=[parse_rule(r) for r in deny])
    return PermissionContext(mode=mode, rules=rules, cwd=str(tmp_path), home=str(tmp_path))


def test_skill_needs_no_approval_but_a_rule_naming_it_denies(tmp_path):
    call = {"skill": "deploy"}
    assert check("Skill", call, ctx(tmp_path)).behavior == Behavior.ALLOW
    assert check("Skill", call, ctx(tmp_path, mode=PermissionMode.PLAN)).behavior == Behavior.ALLOW
    for rule in ("Skill(deploy)", "Skill(deploy *)", "Skill(deploy:*)", "Skill"):
        decision = check("Skill", call, ctx(tmp_path, rule))
        assert decision.behavior == Behavior.DENY and rule in decision.reason, rule
    assert check("Skill", call, ctx(tmp_path, "Skill(lint)")).behavior == Behavior.ALLOW
    with pytest.raises(ValueError, match="did you mean 'Skill'"):
        parse_rule("skill(deploy)")


def test_a_cli_run_lists_the_skill_and_the_model_loads_it(dev_env, tmp_path):
    ws = tmp_path / "ws"
    path = skill(project(ws), "greet", "Greet people in the house style", body="Say ahoy.")
    write(project(ws) / "broken" / "SKILL.md", "no frontmatter")
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
    )
    turns = [tool_turn([("s1", "Skill", {"skill": "greet"})]), text_turn("ahoy")]
    with ReplayServer(turns) as server:
        env["ANTHROPIC_BASE_URL"] = server.base_url
        proc = durable_agent(["run", "hi", "--workspace", str(ws)], env)
    assert proc.returncode == 0, proc.stderr
    assert f"warning: skill {project(ws) / 'broken' / 'SKILL.md'} skipped" in proc.stderr
    first, second = server.requests
    (tool,) = [t for t in first["tools"] if t["name"] == "Skill"]
    assert "- greet: Greet people in the house style" in tool["description"]
    assert "broken" not in tool["description"]
    results = [
        b
        for m in second["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    (result,) = results
    text = json.dumps(result["content"])
    assert not result.get("is_error")
    assert f"Base directory for this skill: {path.parent}" in text and "Say ahoy." in text
