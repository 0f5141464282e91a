"""Secrets and escapes, end to end on a real worker: Grep and Glob do not reach through links out
of the workspace (on ripgrep and on the Python fallback), a dangling link does not fail them, and
neither a tool process nor a hook sees the model's key or the worker's plumbing."""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_agent.engine.state import Terminal
from durable_agent.payloads import data_converter
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from tests.faults.harness import WorkerProcess, process_env
from tests.helpers import start_session
from tests.system_tools import require

SECRET = "s3cr3t-outside-the-workspace"


def _workspace(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_text(f"root:{SECRET}\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("needle in the workspace\n")
    os.symlink(outside / "passwd", workspace / "passwd-link")
    os.symlink(outside, workspace / "outside-dir")
    os.symlink(tmp_path / "gone", workspace / "dangling")
    settings = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "env > hook.env"}]}]}}
    (workspace / ".claude").mkdir()
    (workspace / ".claude" / "settings.json").write_text(json.dumps(settings))
    return workspace


@pytest.mark.parametrize("ripgrep", [True, False], ids=["ripgrep", "python-fallback"])
async def test_tools_and_hooks_stay_inside_and_see_no_secrets(own_server, tmp_path, ripgrep):
    if ripgrep:
        require("rg")
    workspace = _workspace(tmp_path)
    calls = [
        ("g1", "Grep", {"pattern": "root|needle", "output_mode": "content"}),
        ("g2", "Grep", {"pattern": "root", "path": "outside-dir"}),
        ("l1", "Glob", {"pattern": "**/*"}),
        ("b1", "Bash", {"command": "env"}),
    ]
    turns = [tool_turn(calls), text_turn("done")]
    task_queue = f"secrets-{uuid.uuid4()}"
    with ReplayServer(turns) as api:
        env = process_env(tmp_path, own_server.address, api.base_url, task_queue)
        if not ripgrep:  # a PATH without rg: the worker's Grep takes the Python fallback
            env["PATH"] = _path_without_rg(tmp_path, env["PATH"])
        with WorkerProcess(env, tmp_path / "worker.log"):
            client = await Client.connect(
                own_server.address, data_converter=pydantic_data_converter
            )
            _, handle = await start_session(client, workspace, task_queue, prefix="secrets")
            status = await handle.result()
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    results = {b["tool_use_id"]: b for b in api.requests[1]["messages"][-1]["content"]}
    grep, into_link, glob, bash = (results[k] for k in ("g1", "g2", "l1", "b1"))
    assert "needle in the workspace" in grep["content"] and not grep.get("is_error")
    assert SECRET not in json.dumps(api.requests[1])
    assert into_link["is_error"] and "outside the workspace" in into_link["content"]
    assert "notes.txt" in glob["content"] and "passwd" not in glob["content"]
    assert "dangling" not in glob["content"]
    hook_env = (workspace / "hook.env").read_text()
    for seen in (bash["content"], hook_env):
        assert "sk-ant-test-secret" not in seen
        assert "TEMPORAL_ADDRESS" not in seen and "DURABLE_AGENT_" not in seen
        assert f"CLAUDE_PROJECT_DIR={workspace}" in seen


def _path_without_rg(tmp_path: Path, path: str) -> str:
    """PATH with every directory that holds `rg` replaced by a copy without it."""
    out = []
    for number, entry in enumerate(path.split(os.pathsep)):
        folder = Path(entry)
        if not (folder / "rg").exists():
            out.append(entry)
            continue
        shadow = tmp_path / f"bin-{number}"
        shadow.mkdir()
        for tool in folder.iterdir():
            if tool.name != "rg":
                (shadow / tool.name).symlink_to(tool)
        out.append(str(shadow))
    return os.pathsep.join(out)


PROBE = Path(__file__).parents[1] / "secret_probe.py"


def probed(value: str) -> str:
    """The part of a value the probe prints when it finds it."""
    found = re.search(r"probe-secret-[\w-]+", value)
    assert found is not None, value
    return found.group()


@pytest.mark.parametrize("sandboxed", [False, True], ids=["plain", "sandboxed"])
async def test_bash_and_hooks_cannot_read_the_workers_environment_or_memory(
    own_server, tmp_path, sandboxed
):
    """The real worker, holding the project's credentials and two the operator withholds: a
    Bash call and a Stop hook each run the probe (`/proc/$PPID/environ`, `ps axeww`, every
    /proc/*/environ, their own included, and `/proc/$PPID/mem`) and find none; a value that
    is no secret shows, so the probe could see."""
    if sandboxed:
        require("bwrap")
    token = uuid.uuid4().hex
    secrets = {
        "ANTHROPIC_API_KEY": f"probe-secret-key-{token}",
        "ANTHROPIC_AUTH_TOKEN": f"probe-secret-token-{token}",
        "ANTHROPIC_CUSTOM_HEADERS": f"x-auth: probe-secret-headers-{token}",
        "TEMPORAL_API_KEY": f"probe-secret-temporal-{token}",
        "TEMPORAL_TLS_CLIENT_KEY_DATA": f"probe-secret-tls-{token}",
        "DURABLE_AGENT_STORE_URL": f"postgres://agent:probe-secret-store-{token}@db/agent",
        # a key id the probe looks for, then a usable key: the worker refuses a bad one
        "DURABLE_AGENT_CODEC_KEY": f"probe-secret-codec-{token}:{base64.b64encode(os.urandom(32)).decode()}",
        "MY_DB_PASSWORD": f"probe-secret-operator-{token}",  # named by the operator
        "VAULT_TOKEN": f"probe-secret-vault-{token}",  # by a prefix
    }
    visible = f"probe-secret-visible-{token}"
    workspace = tmp_path / "ws"
    (workspace / ".claude").mkdir(parents=True)
    probe = f"{sys.executable} {PROBE} $PPID"
    settings: dict[str, object] = {
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": f"{probe} > hook.txt"}]}]}
    }
    if sandboxed:
        settings["sandbox"] = {"enabled": True}
    (workspace / ".claude" / "settings.json").write_text(json.dumps(settings))
    turns = [tool_turn([("b1", "Bash", {"command": probe})]), text_turn("done")]
    task_queue = f"secrets-{uuid.uuid4()}"
    with ReplayServer(turns) as api:
        env = process_env(
            tmp_path, own_server.address, api.base_url, task_queue, PROBE_VISIBLE=visible,
            DURABLE_AGENT_WITHHOLD_ENV="MY_DB_PASSWORD, VAULT_*", **secrets,
            TEMPORAL_TLS="false",  # the dev server is plain; the Temporal secrets stay probes
        )  # fmt: skip
        with WorkerProcess(env, tmp_path / "worker.log") as worker:
            converter = data_converter(Path(env["DURABLE_AGENT_HOME"]), env)  # the codec too
            client = await Client.connect(own_server.address, data_converter=converter)
            _, handle = await start_session(client, workspace, task_queue, prefix="secrets")
            status = await worker.outcome(handle.result())
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    (result,) = api.requests[1]["messages"][-1]["content"]
    bash, hook = result["content"], (workspace / "hook.txt").read_text()
    sent = json.dumps(api.headers[0])  # the worker had the credentials, and used one
    assert secrets["ANTHROPIC_API_KEY"] in sent or secrets["ANTHROPIC_AUTH_TOKEN"] in sent
    for shown in (bash, hook):
        assert not [s for s in secrets.values() if probed(s) in shown], shown
        assert "mem: denied" in shown or sandboxed, shown
        assert f"all environ: ['{visible}']" in shown or sandboxed, shown
    assert "mem: denied" in hook and f"parent environ: ['{visible}']" in hook, hook
