"""Secrets stay with the worker (issue 10 item 7): after real runs through the CLI with a known
API key or auth token, the credential is in no tool's or hook's environment (nor in the worker's
/proc/PID/environ, which a tool can read), and nowhere in the histories, transcripts, logs, the
dev server's database or the CLI's output."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent import warm
from durable_agent.devserver import DevServerInfo
from durable_agent.payloads import data_converter
from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn
from tests.test_cli import cli_env, durable_agent

SHOW_ENV = (
    "env; echo ---; cat /proc/self/environ | tr '\\0' '\\n'; echo ---; "
    "cat /proc/$PPID/environ | tr '\\0' '\\n'"
)
"""What the model asks Bash to run: its environment, two ways, and its parent's (the worker)."""

HOOK_DUMP = "hook-env.txt"
NOT_PASSED = "settings-env-key-must-not-reach-tools"
MARKER = "SECRETS_TEST_MARKER"
"""A variable that is no secret: it must show where the secrets must not (the scan can see)."""


def new_secret(kind: str) -> str:
    return f"sk-ant-{kind}-{uuid.uuid4().hex}"


def forms(secret: str) -> list[bytes]:
    """The secret's bytes and the part of its base64 that is the same wherever it starts in a
    base64-encoded payload (at each of the three alignments)."""
    raw = secret.encode()
    found = [raw]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw)
        skip = (pad * 4 + 2) // 3  # characters that also carry the padding's bits
        tail = len(encoded) - (4 if (pad + len(raw)) % 3 else 0)
        found.append(encoded[skip:tail])
    return found


def leaks(data: bytes, secret: str) -> bool:
    return any(form in data for form in forms(secret))


def test_the_scan_finds_a_secret_raw_and_in_base64():
    secret = new_secret("probe")
    for pad in range(3):
        assert leaks(b"{" + base64.b64encode(b"x" * pad + secret.encode() + b"}") + b"}", secret)
    assert leaks(secret.encode(), secret) and not leaks(new_secret("probe").encode(), secret)


def script(body: dict[str, Any], index: int) -> Turn:
    """First the Bash call that prints the environment, then done (stateless: any number of
    sessions share one server)."""
    last = body["messages"][-1]["content"]
    answered = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
    return text_turn("done") if answered else tool_turn([("b1", "Bash", {"command": SHOW_ENV})])


def workspace(root: Path) -> Path:
    """A workspace whose Stop hook writes its environment (both ways) to a file."""
    root.mkdir()
    dump = f"env > {HOOK_DUMP}; cat /proc/self/environ | tr '\\0' '\\n' >> {HOOK_DUMP}"
    hooks = {"Stop": [{"hooks": [{"type": "command", "command": dump}]}]}
    (root / ".claude").mkdir()
    # The settings' env reaches tools on purpose, except what would hand them a credential.
    env = {"TEAM_FLAG": "from-settings", "ANTHROPIC_API_KEY": NOT_PASSED}
    (root / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks, "env": env}))
    return root


def run(ws: Path, env: dict[str, str]) -> tuple[dict[str, Any], str]:
    """One headless run; its JSON result and everything it printed."""
    proc = durable_agent(
        ["run", "show me your environment", "--workspace", str(ws), "--output-format", "json",
         "--allowedTools", "Bash"],
        env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["terminal"] == "completed", result
    status = durable_agent(["status", result["session_id"]], env)
    listed = durable_agent(["list"], env)
    assert status.returncode == 0 and listed.returncode == 0, status.stderr + listed.stderr
    return result, proc.stdout + proc.stderr + status.stdout + status.stderr + listed.stdout


def tool_output(server: ReplayServer, session_index: int) -> str:
    """What the Bash call printed, as the model was told it (the second request of a session)."""
    request = server.requests[2 * session_index + 1]
    (block,) = [b for b in request["messages"][-1]["content"] if b.get("type") == "tool_result"]
    content = block["content"]
    return content if isinstance(content, str) else json.dumps(content)


async def histories(home: Path) -> list[bytes]:
    """The JSON history of every workflow on the state dir's dev server (sessions and their
    query workflows alike)."""
    info = DevServerInfo.model_validate_json((home / "devserver.json").read_text())
    client = await Client.connect(info.address)
    found = []
    async for execution in client.list_workflows():
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        found.append((await handle.fetch_history()).to_json().encode())
    return found


def files_under(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def wait_for_warm_worker(home: Path, deadline: float = 60) -> warm.WarmRecord:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for path in (home / "warm").glob("*.json"):
            record = warm.WarmRecord.model_validate_json(path.read_text())
            if warm.is_warm_worker(record.pid):
                return record
        time.sleep(0.1)
    raise AssertionError("no warm worker came up")


def sent(headers: dict[str, str]) -> str:
    """The credential a request carried (the SDK sends a key as `x-api-key` or a bearer)."""
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def assert_nowhere(secrets: list[str], places: dict[str, bytes]) -> None:
    found = [(name, s) for name, data in places.items() for s in secrets if leaks(data, s)]
    assert found == [], f"secrets found in: {[name for name, _ in found]}"


@pytest.fixture
def served(tmp_path):
    """A fresh state dir (`durable-agent server`: dev server + warm worker) whose API is a
    replay server; stopped afterwards."""
    with ReplayServer(script) as server:
        base = cli_env(tmp_path, ANTHROPIC_BASE_URL=server.base_url, **{MARKER: "visible"})
        base.pop("DURABLE_AGENT_TASK_QUEUE")  # the state dir's own queues, warm worker allowed
        base.pop(warm.WARM_ENV)
        try:
            yield tmp_path / "home", base, server
        finally:
            stopped = durable_agent(["server", "--stop"], base)
            assert stopped.returncode == 0, stopped.stderr


async def test_api_key_and_auth_token_are_nowhere(served, tmp_path):
    """The key through the warm worker (started with it), the token through the CLI's own
    worker; each is sent to the API and never seen by Bash, a Stop hook or any record."""
    home, base, server = served
    key, token = new_secret("key"), new_secret("token")
    keyed = {**base, "ANTHROPIC_API_KEY": key}
    started = durable_agent(["server"], keyed)
    assert started.returncode == 0, started.stderr
    record = wait_for_warm_worker(home)

    ws_key, ws_token = workspace(tmp_path / "ws-key"), workspace(tmp_path / "ws-token")
    _, printed_key = run(ws_key, keyed)
    assert f"served by the warm worker (pid {record.pid})" in printed_key
    _, printed_token = run(ws_token, {**base, "ANTHROPIC_AUTH_TOKEN": token})
    assert "served by the warm worker" not in printed_token
    # A key from Claude Code's apiKeyHelper (the worker runs it; its command holds the key).
    helper_key = new_secret("helper")
    user_settings = tmp_path / "user-settings.json"
    user_settings.write_text(json.dumps({"apiKeyHelper": f"echo {helper_key}"}))
    ws_helper = workspace(tmp_path / "ws-helper")
    _, printed_helper = run(ws_helper, {**base, "DURABLE_AGENT_SETTINGS": str(user_settings)})

    # The credentials did reach the API: the test would see them if they went astray.
    assert [sent(h) for h in server.headers] == [key, key, token, token, helper_key, helper_key]
    outputs = [tool_output(server, i) for i in range(3)]
    dumps = [(ws / HOOK_DUMP).read_text() for ws in (ws_key, ws_token, ws_helper)]
    for shown in outputs + dumps:
        assert f"{MARKER}=visible" in shown and "CLAUDE_PROJECT_DIR=" in shown
    for shown in outputs:
        assert "TEAM_FLAG=from-settings" in shown and NOT_PASSED not in shown
    stored = files_under(home)
    assert home / "temporal.db" in stored and (home / "warm").is_dir()
    assert any(b"show me your environment" in data for data in stored.values())
    assert any(f"{MARKER}=visible".encode() in data for data in stored.values())
    places = {str(path): data for path, data in stored.items()}
    places |= {f"history {i}": h for i, h in enumerate(await histories(home))}
    places |= {"tool outputs": "".join(outputs).encode(), "hook dumps": "".join(dumps).encode()}
    places |= {"CLI output": (printed_key + printed_token + printed_helper).encode()}
    workspaces = (ws_key, ws_token, ws_helper)
    places |= {str(p): d for ws in workspaces for p, d in files_under(ws).items()}
    assert_nowhere([key, token, helper_key], places)


PROBE = Path(__file__).with_name("secret_probe.py")
ROOT = Path(__file__).parents[1]
ENVIRONMENT_MODULE = ROOT / "activities" / "tools" / "environment.py"
WORKER_LIKE = """
import importlib.util, subprocess, sys
sys.path.insert(0, sys.argv[4])  # durable_agent.secrets, which it imports (standard library only)
spec = importlib.util.spec_from_file_location("environment", sys.argv[1])
environment = importlib.util.module_from_spec(spec)
spec.loader.exec_module(environment)
if sys.argv[3] == "unprotected":  # the control: only what the worker did before
    environment._protected = True
    environment.scrub_initial_environment()
probe = ["bash", "-c", 'exec "$0" "$1" $PPID', sys.executable, sys.argv[2]]
subprocess.run(probe, env=environment.tool_environment(), check=True)
"""
"""A process that holds a key in its environment like a worker, protects itself as a worker
does (environment.py and durable_agent/secrets.py only, so any Python runs it, as any user) and runs the probe as a tool."""


def probe_secret(kind: str) -> str:
    """A value the probe recognizes (it prints each `probe-secret-…` it finds)."""
    return f"probe-secret-{kind}-{uuid.uuid4().hex}"


def as_user(user: str) -> list[str] | None:
    """The command line prefix that runs a Python as `user` (root, or a plain user: nobody
    when this test runs as root), or None when this machine cannot."""
    root = os.geteuid() == 0
    if user == "root":
        return [sys.executable] if root else None
    if not root:
        return [sys.executable]
    python = "/usr/bin/python3"  # the venv's interpreter may sit in root's private home
    if shutil.which("setpriv") is None or not os.access(python, os.X_OK):
        return None
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python]


@pytest.mark.parametrize("user", ["root", "plain-user"])
def test_a_tool_cannot_read_its_workers_environment_or_memory(user):
    """`cat /proc/$PPID/environ`, `ps axeww`, every /proc/*/environ and /proc/$PPID/mem, from a
    process the worker started: the key is in none. The control (the worker as it was: its
    initial environment blanked, nothing more) shows the probe finds the key in memory."""
    prefix = as_user(user)
    if prefix is None:
        pytest.skip(f"cannot run a process as {user} here")
    key, visible = probe_secret("key"), probe_secret("visible")
    env = {"PATH": os.environ["PATH"], "ANTHROPIC_API_KEY": key, "PROBE_VISIBLE": visible}
    shown = {}
    for mode in ("unprotected", "protected"):
        argv = [*prefix, "-c", WORKER_LIKE, str(ENVIRONMENT_MODULE), str(PROBE), mode, str(ROOT)]
        proc = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        shown[mode] = proc.stdout
    assert key in shown["unprotected"].split("mem:")[1], shown["unprotected"]
    assert key not in shown["protected"], shown["protected"]
    assert "mem: denied" in shown["protected"]
    # The probe could see: the value that is no secret shows wherever it was readable.
    assert f"all environ: ['{visible}']" in shown["protected"]
    assert f"ps: ['{visible}']" in shown["protected"]


def test_the_operator_names_more_variables_to_withhold(monkeypatch):
    """The project's credentials and what DURABLE_AGENT_WITHHOLD_ENV names (exactly, or by a
    prefix) reach no tool, from the worker's environment or from a settings file's `env`."""
    from activities.tools.environment import (
        SETTINGS_ENV,
        WITHHOLD_ENV,
        WORKER_TAG_NAME,
        tool_environment,
        worker_tag,
    )

    monkeypatch.setenv(WITHHOLD_ENV, "MY_DB_PASSWORD, VAULT_*,*")  # a lone * withholds nothing
    kept = {"PATH": "/bin", "VAULT": "kept", "MY_DB_PASSWORD_HINT": "kept", "ANTHROPIC_MODEL": "m"}
    withheld = {
        "MY_DB_PASSWORD": "1", "VAULT_TOKEN": "2", "TEMPORAL_API_KEY": "3",
        "TEMPORAL_TLS_CLIENT_KEY_PATH": "4", "DURABLE_AGENT_STORE_URL": "5",
        "DURABLE_AGENT_CODEC_KEY": "6", "ANTHROPIC_CUSTOM_HEADERS": "7", "ANTHROPIC_API_KEY": "8",
        "ANTHROPIC_AUTH_TOKEN": "9",
    }  # fmt: skip
    token = SETTINGS_ENV.set({"VAULT_ADDR": "from-settings", "TEAM": "from-settings"})
    try:
        env = tool_environment(base={**kept, **withheld})
    finally:
        SETTINGS_ENV.reset(token)
    assert env == {**kept, "TEAM": "from-settings", WORKER_TAG_NAME: worker_tag()}


SCAN_HOOK = "cat > hook-input.json; env > hook-env.txt; cat /proc/$PPID/environ >> hook-env.txt"
SCAN_BASH = (
    'printf %s "$TEAM_TOKEN" | sha256sum; '
    "{ env; echo ---; cat /proc/$PPID/environ | tr '\\0' '\\n'; } | grep -v ^TEAM_TOKEN="
)
"""Bash proves the settings value reached it (its hash, not the value: what a tool prints is
the model's to see) and prints its environment and its parent's (the worker)."""
QUERIES = {
    "SessionWorkflow": ("status", "transcript_path"),
    "QueryWorkflow": ("progress", "phase", "approvals", "hook_requests"),
}


def payloads_in(message: Any) -> list[Any]:
    """Every Payload in a protobuf message, however deep (maps and lists included)."""
    from temporalio.api.common.v1 import Payload

    if isinstance(message, Payload):
        return [message]
    found: list[Any] = []
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            values = list(value.values())
        elif hasattr(value, "ListFields"):
            values = [value]
        else:
            values = list(value)  # a repeated field
        for item in values:
            if hasattr(item, "ListFields"):
                found.extend(payloads_in(item))
    return found


async def test_every_withheld_credential_and_a_settings_env_value_are_nowhere(tmp_path):
    """Issue 22's scan, run as the suite's user (root on CI). The state dir's dev server and
    warm worker, and the CLI, hold every credential the project knows — the model's key and
    token, Temporal's API and TLS keys, a store URL with its password, a codec key — and one
    the operator withholds; the workspace's settings `env` holds a value. After a run whose
    Bash prints its environment and its parent's and whose Stop hook saves its input and
    environment, none of the credentials is in the tool's output (as the model got it), the
    hook's input or environment, the transcript or anything else in the state dir, any history
    (raw or decoded with the key), any query's answer or the CLI's output (run, status, list,
    tail); the settings value is in none of them but the decoded history and the environments
    of the tool and the hook, where it belongs."""
    from temporalio.api.history.v1 import History

    from durable_agent.codec import KEY_ENV, codec_from_env

    key_material = base64.b64encode(os.urandom(32)).decode()
    credentials = {
        "ANTHROPIC_API_KEY": new_secret("key"),
        "TEMPORAL_API_KEY": new_secret("temporal"),
        "TEMPORAL_TLS_CLIENT_KEY_DATA": new_secret("tls"),
        "DURABLE_AGENT_STORE_URL": f"postgres://agent:{new_secret('store')}@127.0.0.1:1/agent",
        KEY_ENV: f"scan:{key_material}",
        "OPERATOR_DB_PASSWORD": new_secret("operator"),
    }
    # what would give each away: the codec's key material (its id is in every payload)
    needles = [v for k, v in credentials.items() if k != KEY_ENV] + [key_material]
    needles.append(credentials["DURABLE_AGENT_STORE_URL"].split(":")[2].split("@")[0])
    value = f"settings-env-value-{uuid.uuid4().hex}"
    ws = tmp_path / "ws"
    (ws / ".claude").mkdir(parents=True)
    hooks = {"Stop": [{"hooks": [{"type": "command", "command": SCAN_HOOK}]}]}
    settings = {"hooks": hooks, "env": {"TEAM_TOKEN": value}}
    (ws / ".claude" / "settings.json").write_text(json.dumps(settings))
    turns = [tool_turn([("b1", "Bash", {"command": SCAN_BASH})]), text_turn("done")]
    home = tmp_path / "home"
    with ReplayServer(turns) as server:
        env = cli_env(tmp_path, ANTHROPIC_BASE_URL=server.base_url, **{MARKER: "visible"})
        env.pop("DURABLE_AGENT_TASK_QUEUE")  # the state dir's own queues, warm worker allowed
        env.pop(warm.WARM_ENV)
        env |= credentials | {"DURABLE_AGENT_WITHHOLD_ENV": "OPERATOR_*"}
        try:
            started = durable_agent(["server"], env)
            assert started.returncode == 0, started.stderr
            record = wait_for_warm_worker(home)
            result, printed = run(ws, env)
            assert f"served by the warm worker (pid {record.pid})" in printed
            tail = durable_agent(["tail", result["session_id"]], env)
            printed += tail.stdout + tail.stderr

            info = DevServerInfo.model_validate_json((home / "devserver.json").read_text())
            codec = codec_from_env(env)
            assert codec is not None
            plain = await Client.connect(info.address)
            keyed = await Client.connect(info.address, data_converter=data_converter(home, env))
            raw_histories, decoded, answers = b"", b"", []
            async for execution in plain.list_workflows():
                history = await plain.get_workflow_handle(
                    execution.id, run_id=execution.run_id
                ).fetch_history()
                raw_histories += history.to_json().encode()
                opened = await codec.decode(payloads_in(History(events=history.events)))
                decoded += b"".join(p.SerializeToString() for p in opened)
                handle = keyed.get_workflow_handle(execution.id, run_id=execution.run_id)
                for name in QUERIES[execution.workflow_type]:
                    answers.append(json.dumps(await handle.query(name), default=str))
        finally:
            stopped = durable_agent(["server", "--stop"], env)
            assert stopped.returncode == 0, stopped.stderr

    assert server.headers and sent(server.headers[0]) == credentials["ANTHROPIC_API_KEY"]
    output = tool_output(server, 0)
    hook_input = (ws / "hook-input.json").read_bytes()
    hook_env = (ws / "hook-env.txt").read_text()
    # The scan can see: what is no secret shows in each place it looks.
    assert hashlib.sha256(value.encode()).hexdigest() in output
    assert f"{MARKER}=visible" in output and f"{MARKER}=visible" in hook_env
    assert b'"hook_event_name": "Stop"' in hook_input or b'"Stop"' in hook_input
    assert b"show me your environment" in decoded and b"show me your environment" not in (
        raw_histories
    )
    assert leaks(decoded, value) and f"TEAM_TOKEN={value}" in hook_env
    assert any("completed" in a for a in answers) and any(
        result["session_id"] in a for a in answers
    )
    stored = {str(p): d for p, d in files_under(home).items()}
    assert any(b"show me your environment" in d for d in stored.values())  # the transcript
    places = stored | {f"workspace {p.name}": d for p, d in files_under(ws).items()}
    places |= {"tool output": output.encode(), "hook input": hook_input}
    places |= {"raw histories": raw_histories, "queries": "\n".join(answers).encode()}
    places |= {"CLI output": printed.encode()}
    assert_nowhere(
        [value],
        {
            k: v
            for k, v in places.items()
            if not k.endswith(("-env.txt", ".json")) or k == "hook input"
        },
    )
    assert_nowhere(needles, places | {"decoded histories": decoded})
