"""The CLI package's layering: no import cycle among its modules, and a command imports only what
it needs (no workflows/, and the worker's modules only when it runs a worker)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "durable_agent" / "cli"
NAME = "durable_agent.cli"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module → the package's modules it imports, at top level or inside a function (a lazy
    import that closes a circle is still a circle). `from durable_agent.cli import x` is an
    edge to the submodule x when there is one, else to the package itself."""
    files = {module_name(p): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base
                    for alias in node.names
                ]
            for target in targets:
                while target and target not in files:  # `import a.b.c` reaches a.b.c's module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cli_package_has_no_import_cycle():
    graph = import_graph(PACKAGE)
    assert {f"{NAME}.args", f"{NAME}.commands", f"{NAME}.chat", f"{NAME}.watching"} <= set(graph)
    assert find_cycle(graph) is None, " → ".join(find_cycle(graph) or [])
    # The shared pieces sit below the commands: none imports a command's module or the package.
    commands = {NAME, f"{NAME}.commands", f"{NAME}.chat"}
    for module, imported in graph.items():
        if module not in commands:
            assert not imported & commands, f"{module} imports {imported & commands}"


def test_the_graph_finds_a_circle():
    """The checker itself: the shape the CLI had (cli ↔ commands ↔ chat ↔ watching)."""
    circle = {"cli": {"commands"}, "commands": {"chat", "watching"}, "chat": {"commands"}}
    assert find_cycle({**circle, "watching": {"cli"}}) == ["chat", "commands", "chat"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


# One interpreter loads the third-party packages the CLI builds on, then forks a child per
# module that imports that module alone: the project's modules are never loaded before the
# fork, so a module that works only when another of ours was imported first still fails (and a
# fresh interpreter a module, as this once was, cost 25 s of CPU).
ALONE = """
import importlib, os, sys, traceback
import pydantic, temporalio.client  # the heavy, shared part: loaded once
assert not [m for m in sys.modules if m.split(".")[0] in ("durable_agent", "activities", "workflows")]
failed = 0
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)  # at once: a crash in the native layer's finalization is not the point
    if os.waitpid(pid, 0)[1] != 0:
        print(f"FAILED {name}", file=sys.stderr, flush=True)
        failed += 1
sys.stdout.flush()
os._exit(1 if failed else 0)
"""


def import_each_alone(cwd: Path, names: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", ALONE, *names], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_every_cli_module_imports_alone():
    proc = import_each_alone(ROOT, sorted(import_graph(PACKAGE)))
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_the_import_check_sees_a_module_that_needs_another_first(tmp_path):
    """The checker itself: a module that fails unless another was imported before it."""
    (tmp_path / "needs_first.py").write_text("import sys\nsys.modules['first_one'].VALUE\n")
    (tmp_path / "first_one.py").write_text("VALUE = 1\n")
    proc = import_each_alone(tmp_path, ["first_one", "needs_first"])
    assert proc.returncode == 1 and "FAILED needs_first" in proc.stderr, proc.stderr
    assert "FAILED first_one" not in proc.stderr


# What a command that runs no worker must not import (seconds of start-up: `import anthropic`
# alone takes over a second), and what no command imports.
WORKER_MODULES = ("anthropic", "activities.model", "temporalio.worker", "durable_agent.wiring")
NEVER = ("workflows",)

PROBE = """
import asyncio, json, os, sys
import temporalio.client
from durable_agent.cli import command, parser
from durable_agent.cli.errors import CliError

started = asyncio.Event()
real_start = temporalio.client.Client.start_workflow

async def start_workflow(self, *args, **kwargs):
    handle = await real_start(self, *args, **kwargs)
    started.set()
    return handle

temporalio.client.Client.start_workflow = start_workflow

async def main():
    args = parser().parse_args(sys.argv[1:])
    task = asyncio.ensure_future(command(args.command)(args))
    waiter = asyncio.ensure_future(started.wait())
    await asyncio.wait([task, waiter], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    outcome = "started" if started.is_set() else "ended"
    for pending in (task, waiter):
        pending.cancel()
    try:
        await task
    except CliError as exc:
        outcome = f"error: {exc}"
    except asyncio.CancelledError:
        pass
    return outcome

outcome = asyncio.run(main())
print(json.dumps({"outcome": outcome, "modules": sorted(sys.modules)}), flush=True)
os._exit(0)  # as the CLI ends (hard_exit): the SDK's native layer can crash in finalization
"""


def loaded_by(args: list[str], env: dict[str, str]) -> tuple[str, set[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return found["outcome"], set(found["modules"])


def of(prefixes: tuple[str, ...], modules: set[str]) -> set[str]:
    return {m for m in modules if any(m == p or m.startswith(f"{p}.") for p in prefixes)}


@pytest.fixture
def cli_env(dev_env, tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "TEMPORAL_"))}
    env.update(
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
        DURABLE_AGENT_HOME=str(tmp_path / "home"),
        DURABLE_AGENT_TASK_QUEUE=f"imports-{os.getpid()}",  # no worker serves it
    )
    return env


@pytest.mark.parametrize(
    "args",
    [
        ["run", "hello", "--no-worker"],
        ["status", "no-such-session"],
        ["interrupt", "no-such-session"],
        ["tail", "no-such-session"],
    ],
)
def test_a_command_without_a_worker_imports_no_worker_modules(cli_env, tmp_path, args):
    if args[0] == "run":
        args = [*args, "--workspace", str(tmp_path)]
    outcome, modules = loaded_by(args, cli_env)
    assert outcome == "started" if args[0] == "run" else outcome.startswith("error:"), outcome
    assert of(WORKER_MODULES + NEVER, modules) == set()


async def test_what_the_cli_spells_itself_agrees_with_the_worker(dev_env, tmp_path, monkeypatch):
    """The CLI does not import workflows/ or wiring; the few things it must know of them are
    the same there."""
    from durable_agent import wiring
    from durable_agent.cli import connect, sessions
    from workflows.session import query_workflow_id

    assert sessions.query_workflow_id("s-1", 3) == query_workflow_id("s-1", 3)
    assert sessions.DEFAULT_TASK_QUEUE == wiring.DEFAULT_TASK_QUEUE
    monkeypatch.setenv("DURABLE_AGENT_HOME", str(tmp_path))
    address = dev_env.client.service_client.config.target_host

    runtime = connect.quiet_runtime()
    ours = await connect.temporal_client(address, runtime)
    theirs = await wiring.connect(address, runtime=runtime)
    assert _described(ours) == _described(theirs)


def _described(client: object) -> tuple[object, ...]:
    from temporalio.client import Client

    assert isinstance(client, Client)
    dc = client.data_converter
    storage = dc.external_storage
    drivers = [(d.name(), getattr(d, "root", None)) for d in storage.drivers] if storage else None
    plugins = [type(p) for p in client.config().get("plugins", [])]
    return (
        client.namespace,
        dc.payload_converter_class,
        dc.failure_converter_class,
        dc.payload_codec,
        drivers,
        plugins,
    )
