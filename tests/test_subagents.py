"""Sub-agents (issue 25 item 1): each `Agent` call is a child QueryWorkflow with its agent's
system prompt, exactly its tools and its model; the parent gets only the reports, in block
order; a worker killed during a child's model call costs the child only that call."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from typing import Any

import pytest

from durable_agent.agents import AgentsFlagError, from_flag, session_agents
from durable_agent.engine.agents import AgentDef, agent_model, agent_tools, find_agent
from durable_agent.engine.contracts import SessionInput
from durable_agent.engine.state import QueryConfig, Terminal
from durable_agent.replay import ReplayServer, text_turn, tool_turn
from durable_agent.replay.cassette import Turn
from tests.helpers import run_session
from tests.test_worker_crash import start_worker, wait_for
from workflows.session import SessionWorkflow

REVIEWER = AgentDef(
    name="reviewer", description="Reviews code", prompt="You are REVIEWER-AGENT.",
    tools=("Read", "Grep"), model="haiku", source="project",
)  # fmt: skip
SCRIBE = AgentDef(
    name="scribe", description="Writes notes", prompt="You are SCRIBE-AGENT.",
    tools=("Read",), source="flag",
)  # fmt: skip


def system_of(body: dict[str, Any]) -> str:
    return json.dumps(body.get("system", ""))


class Script:
    """Each agent's requests get its own turns, the parent's the rest (children run at once:
    their requests interleave)."""

    def __init__(self, parent: list[Turn], **agents: list[Turn]) -> None:
        self.parent, self.agents = list(parent), {k: list(v) for k, v in agents.items()}
        self.seen: dict[str, list[dict[str, Any]]] = {"parent": []}

    def __call__(self, body: dict[str, Any], index: int) -> Turn:
        for marker, turns in self.agents.items():
            if marker in system_of(body):
                self.seen.setdefault(marker, []).append(body)
                return turns.pop(0)
        self.seen["parent"].append(body)
        return self.parent.pop(0)


def two_agents() -> Turn:
    return tool_turn([
        ("a1", "Agent", {"description": "review", "prompt": "Review x.py", "subagent_type": "reviewer"}),
        ("a2", "Agent", {"description": "notes", "prompt": "Note x.py", "subagent_type": "scribe"}),
    ])  # fmt: skip


async def test_two_agents_in_one_message_report_in_block_order(
    dev_env, store, workspace, task_queue
):
    (workspace / "x.py").write_text("SECRET-OF-THE-CHILD = 1\n")
    script = Script(
        [two_agents(), text_turn("both reviewed")],
        **{
            "REVIEWER-AGENT": [
                tool_turn([("r1", "Read", {"file_path": "x.py"})]),
                text_turn("REVIEW REPORT: fine"),
            ],
            "SCRIBE-AGENT": [text_turn("SCRIBE REPORT: noted")],
        },
    )
    agents = [REVIEWER.model_dump(), SCRIBE.model_dump()]
    with ReplayServer(script) as server:
        sid, status = await run_session(
            dev_env.client, server, store, workspace, "review x.py", task_queue,
            model="claude-sonnet-4-5", call={"agents": agents},
        )  # fmt: skip
    result = status.last_result
    assert result is not None and result.terminal == Terminal.COMPLETED, result
    assert result.final_text == "both reviewed"
    first, second = script.seen["parent"]
    agent_tool = next(t for t in first["tools"] if t["name"] == "Agent")
    assert "reviewer: Reviews code" in agent_tool["description"]
    assert "general-purpose" in agent_tool["description"]
    reports = second["messages"][-1]["content"]
    assert [r["tool_use_id"] for r in reports] == ["a1", "a2"]
    assert "REVIEW REPORT: fine" in json.dumps(reports[0])
    assert "SCRIBE REPORT: noted" in json.dumps(reports[1])
    # Only the reports: nothing of the children's own conversations.
    assert "SECRET-OF-THE-CHILD" not in json.dumps(second)
    assert "REVIEWER-AGENT" not in json.dumps(second)
    for body in script.seen["REVIEWER-AGENT"]:
        assert body["model"] == "claude-haiku-4-5"
        assert sorted(t["name"] for t in body["tools"]) == ["Grep", "Read"]
        assert body["messages"][0]["content"][0]["text"] == "Review x.py"
    assert "SECRET-OF-THE-CHILD" in json.dumps(script.seen["REVIEWER-AGENT"][1])
    (scribe,) = script.seen["SCRIBE-AGENT"]
    assert scribe["model"] == "claude-sonnet-4-5"  # inherits the parent's
    assert [t["name"] for t in scribe["tools"]] == ["Read"]
    # Their usage is the parent's too: 5 calls (2 parent, 2 reviewer, 1 scribe).
    assert set(result.usage_by_model) == {"claude-sonnet-4-5", "claude-haiku-4-5"}
    # The parent's transcript holds the reports, not the children's messages.
    chain = store.chain(sid, result.head_uuid)
    assert "SECRET-OF-THE-CHILD" not in json.dumps([e.model_dump() for e in chain])


async def test_an_unknown_agent_and_a_bad_input_are_error_results(
    dev_env, store, workspace, task_queue
):
    turns = [
        tool_turn([
            ("a1", "Agent", {"description": "x", "prompt": "y", "subagent_type": "nobody"}),
            ("a2", "Agent", {"prompt": "no description"}),
        ]),
        text_turn("ok"),
    ]  # fmt: skip
    with ReplayServer(turns) as server:
        _, status = await run_session(dev_env.client, server, store, workspace, "go", task_queue)
    assert status.last_result is not None and status.last_result.terminal == Terminal.COMPLETED
    results = server.requests[1]["messages"][-1]["content"]
    assert results[0]["is_error"] and "No agent named 'nobody'" in json.dumps(results[0])
    assert "general-purpose" in json.dumps(results[0])
    assert results[1]["is_error"] and "description" in json.dumps(results[1])


def test_definitions_files_flag_and_choices(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    (ws / ".claude" / "agents").mkdir(parents=True)
    (ws / ".claude" / "agents" / "reviewer.md").write_text(
        "---\nname: reviewer\ndescription: Reviews\ntools: Read, Grep\nmodel: haiku\n---\nBe strict.\n"
    )
    (ws / ".claude" / "agents" / "broken.md").write_text("no frontmatter")
    (ws / ".claude" / "agents" / "bad-tools.md").write_text(
        "---\nname: x\ndescription: d\ntools: 3\n---\n"
    )
    user = tmp_path / "user"
    (user / "agents").mkdir(parents=True)
    (user / "agents" / "reviewer.md").write_text("---\nname: reviewer\ndescription: mine\n---\n")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(user))
    found = session_agents(ws)
    (reviewer,) = found.found
    assert reviewer.prompt == "Be strict." and reviewer.tools == ("Read", "Grep")
    assert reviewer.description == "Reviews"  # the project's wins over the user's
    assert len(found.warnings) == 2 and all(w.startswith("warning: agent ") for w in found.warnings)
    flagged = session_agents(ws, '{"reviewer": {"description": "flag", "prompt": "P"}}')
    assert flagged.found[0].description == "flag"
    for bad in ("not json", "[]", '{"a": 1}', '{"a": {"prompt": "p"}}'):
        with pytest.raises(AgentsFlagError):
            from_flag(bad)
    assert agent_model(REVIEWER, None, "parent-model") == "claude-haiku-4-5"
    assert agent_model(SCRIBE, "opus", "parent-model") == "claude-opus-4-1"
    assert agent_model(SCRIBE, None, "parent-model") == "parent-model"
    assert agent_tools(REVIEWER, ["Read", "Bash", "Agent"]) == ("Read",)  # never wider
    assert "Agent" not in agent_tools(find_agent([], "general-purpose"), ["Read", "Agent"])  # type: ignore[arg-type]


async def test_a_worker_killed_during_a_childs_model_call(dev_env, tmp_path):
    """The child's finished model call is not asked again; its running one is; the parent's
    turn is not repeated; the prompt completes with the report."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    slow = text_turn("CHILD REPORT " + "x" * 400)
    slow.event_delay = 0.25  # seconds of streaming: the kill lands in it
    order: list[str] = []

    def route(body: dict[str, Any], index: int) -> Turn:
        child = body["messages"][0]["content"][0].get("text") == "read a.txt"
        order.append("child" if child else "parent")
        if child:
            return child_turns.pop(0)
        return parent_turns.pop(0)

    parent_turns = [
        tool_turn([("a1", "Agent", {"description": "d", "prompt": "read a.txt"})]),
        text_turn("parent done"),
    ]
    child_turns = [
        tool_turn([("r1", "Read", {"file_path": "a.txt"})]),
        slow,
        text_turn("CHILD REPORT after the kill"),
    ]
    task_queue = f"agents-{uuid.uuid4()}"
    with ReplayServer(route) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "TEMPORAL_"))}
        env.update(
            TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
            ANTHROPIC_BASE_URL=server.base_url,
            ANTHROPIC_API_KEY="dummy",
            DURABLE_AGENT_HOME=str(tmp_path / "home"),
            DURABLE_AGENT_TASK_QUEUE=task_queue,
            DURABLE_AGENT_SETTINGS=str(tmp_path / "none.json"),
        )
        config = QueryConfig(workspace=str(workspace), model_heartbeat_seconds=2)
        sid = f"agents-{uuid.uuid4()}"
        handle = await dev_env.client.start_workflow(
            SessionWorkflow.run,
            SessionInput(session_id=sid, config=config, initial_prompt="go", close_when_idle=True),
            id=sid,
            task_queue=task_queue,
        )
        worker = start_worker(env)
        try:
            await wait_for(lambda: order.count("child") >= 2)  # the child's 2nd call streams
            await asyncio.sleep(0.5)
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            worker = start_worker(env)
            status = await asyncio.wait_for(handle.result(), 120)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
    result = status.last_result
    assert result is not None and result.terminal == Terminal.COMPLETED, result
    assert result.final_text == "parent done"
    # parent, child 1, child 2 (killed), child 2 again, parent: nothing else asked twice
    assert order == ["parent", "child", "child", "child", "parent"]
    assert server.requests[3]["messages"] == server.requests[2]["messages"]
    report = server.requests[4]["messages"][-1]["content"][0]
    assert report["tool_use_id"] == "a1" and "CHILD REPORT after the kill" in json.dumps(report)


async def test_a_background_agent_reports_at_the_next_iteration_boundary(
    dev_env, store, workspace, task_queue
):
    """The parent goes on at once; the report comes with the next tool results after the agent
    finished, or, once the parent has finished, as a message that starts another turn."""
    slow = text_turn("BACKGROUND REPORT: all good")
    slow.event_delay = 0.6  # the agent's answer streams for seconds: the parent is quicker
    marker = workspace / "started"
    script = Script(
        [
            tool_turn([("a1", "Agent", {"description": "bg", "prompt": "look around",
                                        "subagent_type": "scribe", "run_in_background": True})]),
            tool_turn([("b1", "Bash", {"command": f"touch {marker}"})]),
            text_turn("waiting for the agent"),
            text_turn("got the report"),
        ],
        **{"SCRIBE-AGENT": [slow]},
    )  # fmt: skip
    with ReplayServer(script) as server:
        _, status = await run_session(
            dev_env.client, server, store, workspace, "go", task_queue,
            call={"agents": [SCRIBE.model_dump()]},
        )  # fmt: skip
    result = status.last_result
    assert result is not None and result.terminal == Terminal.COMPLETED, result
    assert result.final_text == "got the report"
    bodies = script.seen["parent"]
    started = bodies[1]["messages"][-1]["content"][0]
    assert "running in the background (task id a1)" in json.dumps(started)
    # Not there with the Bash results (the agent still streamed), but as the message after.
    assert "BACKGROUND REPORT" not in json.dumps(bodies[2]["messages"][-1])
    last = bodies[3]["messages"][-1]
    assert last["role"] == "user" and "BACKGROUND REPORT: all good" in json.dumps(last)
    assert "background_agent_reports" in [t.value for t in result.transitions]


async def test_an_interrupt_ends_a_sub_agents_running_command_with_the_prompt(
    dev_env, store, workspace, task_queue
):
    """Esc while a sub-agent's Bash runs: the interrupt cancels the child workflow, which closes
    at once; its tool's activity took that for a lost server and let the command run on until
    the session ended (a fault campaign: 2 of 2 tries). Now it ends with the prompt."""
    from activities.tools.environment import session_and_agents_prefixes, tagged_processes
    from durable_agent.names import Signals
    from durable_agent.wiring import build_worker
    from tests.helpers import replay_client_factory, start_session

    ticks = workspace / "ticks"
    command = f"for i in $(seq 100); do echo t >> {ticks}; sleep 0.2; done"
    worker_agent = AgentDef(
        name="runner", description="Runs things", prompt="You are RUNNER-AGENT.",
        tools=("Bash",), source="flag",
    )  # fmt: skip
    script = Script(
        [
            tool_turn([("a1", "Agent", {"description": "run", "prompt": "run it",
                                        "subagent_type": "runner"})]),
            text_turn("spare"),
        ],
        **{"RUNNER-AGENT": [tool_turn([("b1", "Bash", {"command": command})]),
                            text_turn("spare")]},
    )  # fmt: skip
    with ReplayServer(script, strict=False) as server:
        factory = replay_client_factory(server)
        async with build_worker(dev_env.client, task_queue, store, factory):
            sid, handle = await start_session(
                dev_env.client, workspace, task_queue, "go", close_when_idle=False,
                config={"agents": [worker_agent.model_dump()]},
            )  # fmt: skip
            await wait_for(ticks.exists, 60)
            await handle.signal(Signals.INTERRUPT)
            for _ in range(200):
                status = await handle.query(SessionWorkflow.status)
                if status.last_result is not None:
                    break
                await asyncio.sleep(0.1)
            assert status.last_result is not None
            assert status.last_result.terminal == Terminal.ABORTED_TOOLS
            left = tagged_processes(session_and_agents_prefixes(sid), prefix=True)
            counted = ticks.read_text().count("t")
            await asyncio.sleep(1.0)
            assert ticks.read_text().count("t") == counted, "the sub-agent's command runs on"
            assert left == []
            await handle.signal(Signals.CLOSE)
            await asyncio.wait_for(handle.result(), 60)
