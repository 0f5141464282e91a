"""What the model is told first (issue 24, item 1): our system prompt, and the environment
block gathered once where the session starts — directory, git (branch, main branch, status,
recent commits), platform, date, model — in the request body the API receives."""

from __future__ import annotations

import datetime
import json
import subprocess
from pathlib import Path

from durable_agent.engine.prompt import SYSTEM_PROMPT, Environment, environment_block
from durable_agent.environment import gather
from durable_agent.replay import ReplayServer, text_turn
from tests.test_claude_cli import env_for
from tests.test_cli import cli_env, durable_agent


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.email", "t@example.com"],
        ["config", "user.name", "T"],
    ):
        subprocess.run(["git", "-C", str(path), *args], check=True)
    (path / "app.py").write_text("print(1)\n")
    subprocess.run(["git", "-C", str(path), "add", "."], check=True)
    subprocess.run(["git", "-C", str(path), "commit", "-qm", "the first commit"], check=True)
    (path / "app.py").write_text("print(2)\n")
    (path / "new.txt").write_text("new\n")
    return path


def test_gather_reads_the_git_context_and_nothing_outside_a_repository(tmp_path):
    env = gather(git_repo(tmp_path / "repo"))
    assert env.git is not None and env.git.branch == "main" and env.git.main_branch == "main"
    assert env.git.status.splitlines() == [" M app.py", "?? new.txt"]
    assert [c.split(" ", 1)[1] for c in env.git.recent_commits] == ["the first commit"]
    assert env.today == datetime.date.today().isoformat()
    plain = tmp_path / "plain"
    plain.mkdir()
    assert gather(plain).git is None


def test_the_block_names_the_model_and_its_cutoff_and_caps_nothing_it_should_not():
    env = Environment(working_directory="/w", platform="linux", os_version="Linux 6", today="d")
    block = environment_block(env, "claude-sonnet-4-5-20250929")
    assert "Working directory: /w" in block and "Is a git repository: no" in block
    assert "Model: claude-sonnet-4-5-20250929" in block and "Knowledge cutoff:" in block
    assert "Knowledge cutoff" not in environment_block(env, "some-other-model")


def test_the_first_request_carries_the_prompt_and_the_environment(dev_env, tmp_path):
    ws = git_repo(tmp_path / "ws")
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
    )
    with ReplayServer([text_turn("ok")]) as server:
        env["ANTHROPIC_BASE_URL"] = server.base_url
        proc = durable_agent(["run", "hi", "--workspace", str(ws)], env)
    assert proc.returncode == 0, proc.stderr
    system = "".join(block["text"] for block in server.requests[0]["system"])
    assert system.startswith(SYSTEM_PROMPT)
    for needle in (
        f"Working directory: {ws}",
        "Is a git repository: yes",
        "Current branch: main",
        "?? new.txt",
        "the first commit",
        f"Today's date: {datetime.date.today().isoformat()}",
        f"Model: {server.requests[0]['model']}",
    ):
        assert needle in system, needle


def test_system_prompt_replaces_it_all_and_append_adds(dev_env, tmp_path):
    with ReplayServer([text_turn("a"), text_turn("b")]) as server:
        env = env_for(dev_env, tmp_path, server)
        ws = tmp_path / "ws"
        ws.mkdir()
        for flags in (["--system-prompt", "Only this."], ["--append-system-prompt", "And this."]):
            proc = subprocess.run(
                ["durable-agent", "-p", "hi", *flags], cwd=ws, env=env, capture_output=True,
                text=True, timeout=120, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
    replaced, appended = (json.dumps(r["system"]) for r in server.requests)
    assert "Only this." in replaced and "Working directory" not in replaced
    assert "Working directory" in appended and appended.index("And this.") > appended.index(
        "# Environment"
    )


def test_memory_is_in_the_first_request_and_each_request_once(dev_env, tmp_path, monkeypatch):
    from durable_agent.replay import tool_turn

    user_dir = tmp_path / "claude-dir"
    user_dir.mkdir()
    (user_dir / "CLAUDE.md").write_text("Always answer in haiku. @extra.md")
    (user_dir / "extra.md").write_text("Imported rule: be brief.")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(user_dir))
    ws = git_repo(tmp_path / "ws")
    (ws / "CLAUDE.md").write_text("Project rule: run pytest.")
    (ws / "CLAUDE.local.md").write_text("Local rule: my sandbox.")
    env = cli_env(
        tmp_path,
        ANTHROPIC_API_KEY="dummy",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
    )
    turns = [tool_turn([("r1", "Read", {"file_path": "app.py"})]), text_turn("ok"), text_turn("2")]
    with ReplayServer(turns) as server:
        env["ANTHROPIC_BASE_URL"] = server.base_url
        proc = durable_agent(["run", "hi", "--workspace", str(ws)], env)
        assert proc.returncode == 0, proc.stderr
        only = durable_agent(
            ["run", "hi", "--workspace", str(ws), "--setting-sources", "project"], env
        )
    first, second, third = (json.dumps(r) for r in server.requests)
    for rule in ("Always answer in haiku", "Imported rule: be brief", "Project rule: run pytest",
                 "Local rule: my sandbox"):  # fmt: skip
        assert first.count(rule) == 1 and second.count(rule) == 1, rule
    assert only.returncode == 0, only.stderr
    assert "Project rule" in third and "answer in haiku" not in third and "Local rule" not in third
