"""A fleet (issue 23's acceptance): three `python worker.py` processes that share only the
Temporal server and PostgreSQL — each its own state dir, each in its own mount namespace where
the submitter's directory and the other workers' homes are empty tmpfs, as on separate hosts —
run 20 sessions submitted with `run --no-worker` and `-p`. Mid-session the worker hosting most
workspaces is SIGKILLed and its home deleted. Every session completes with a valid transcript;
the tool after the loss sees the files of the last checkpoint; each submitter's workspace ends
with the files the model left; no side-effecting tool ran twice (markers outside the
workspaces); and a fourth home with only the store URL and the Temporal address lists, shows
and resumes a session."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from durable_agent.replay import ReplayServer, Turn, text_turn, tool_turn
from durable_agent.store.postgres import PostgresStore
from tests.faults.harness import ROOT, WorkerProcess, process_env, transcript_problems, wait_for

SESSIONS = 20
WORKERS = 3


def task_of(body: dict[str, Any]) -> str:
    first = body["messages"][0]["content"]
    text = first if isinstance(first, str) else " ".join(b.get("text", "") for b in first)
    return text.split("task ", 1)[1].split()[0]


def script(marks: Path) -> Any:
    """Each session's turns, chosen from its own conversation (the sessions run at once):
    append to log.txt, append again after a pause (the host dies in it), read the log, write
    the result. Each Bash call leaves a marker line, with the directory it ran in, outside the
    workspaces."""

    def turn(body: dict[str, Any], _index: int) -> Turn:
        task = task_of(body)
        stage = sum(1 for m in body["messages"] if m["role"] == "assistant")
        mark = f'echo "{task} %s $PWD" >> {marks}/{task}.log'
        if stage == 0:
            return tool_turn(
                [("b1", "Bash", {"command": f"{mark % 'b1'} && printf 'one\\n' >> log.txt"})]
            )
        if stage == 1:
            command = f"{mark % 'b2'} && sleep 6 && printf 'two\\n' >> log.txt"
            return tool_turn([("b2", "Bash", {"command": command})])
        if stage == 2:
            return tool_turn([("r1", "Read", {"file_path": "log.txt"})])
        if stage == 3:
            return tool_turn(
                [("w1", "Write", {"file_path": "result.txt", "content": f"{task} done\n"})]
            )
        return text_turn(f"done {task}")

    return turn


def isolated(hidden: list[Path]) -> list[str]:
    """`unshare -m`: the worker's own mount namespace, `hidden` covered by empty tmpfs."""
    mounts = " && ".join(f"mount -t tmpfs tmpfs {p}" for p in hidden)
    return ["unshare", "-m", "sh", "-c", f'{mounts} && exec "$@"', "sh"]


async def test_a_fleet_survives_the_loss_of_a_host(dev_env, tmp_path, pg_url):
    address = dev_env.client.service_client.config.target_host
    task_queue = f"fleet-{tmp_path.name}"
    submitter = tmp_path / "submitter"
    marks = tmp_path / "marks"
    homes = [tmp_path / f"host{n}" for n in range(WORKERS)]
    for folder in (submitter, marks, *homes):
        folder.mkdir()
    server = ReplayServer(script(marks)).start()
    common = dict(DURABLE_AGENT_STORE=pg_url)
    workers = []
    for n, home in enumerate(homes):
        env = process_env(tmp_path, address, server.base_url, task_queue, **common)
        env["DURABLE_AGENT_HOME"] = str(home)
        hidden = [submitter, *(h for h in homes if h != home)]
        log = tmp_path / f"worker{n}.log"
        workers.append(WorkerProcess(env, log, wrap=isolated(hidden)).start())
    try:
        for worker in workers:
            await worker.polling(dev_env.client, task_queue)
        cli_env = process_env(submitter, address, server.base_url, task_queue, **common)
        cli_env["PYTHONPATH"] = str(ROOT)
        runs = [asyncio.ensure_future(_submit(n, submitter, cli_env)) for n in range(SESSIONS)]

        def b2_hosts() -> Counter[str]:
            """Each started-b2 marker's host home (the copy it ran in lies under it)."""
            seen: Counter[str] = Counter()
            for file in marks.glob("*.log"):
                for line in file.read_text().splitlines():
                    _, tool, where = line.split(" ", 2)
                    if tool == "b2":
                        seen[next(str(h) for h in homes if where.startswith(str(h)))] += 1
            return seen

        await wait_for(lambda: sum(b2_hosts().values()) >= 4, 180, "sessions in their pause")
        victim_home = Path(b2_hosts().most_common(1)[0][0])
        victim = workers[homes.index(victim_home)]
        victim.kill()
        shutil.rmtree(victim_home, ignore_errors=True)
        lost_at = asyncio.get_running_loop().time()
        results = await asyncio.wait_for(asyncio.gather(*runs), 600)
        recovered = asyncio.get_running_loop().time() - lost_at
        await _from_a_fourth_home(tmp_path, address, server, task_queue, common, results)
    finally:
        for worker in workers:
            worker.stop()
        server.stop()

    store = PostgresStore(tmp_path / "reader", pg_url)
    lost_sessions = 0
    for n, (kind, proc, session_id) in enumerate(results):
        assert proc.returncode == 0, f"session {n} ({kind}): {proc.stderr[-2000:]}"
        ws = submitter / f"ws{n}"
        # The transcript is whole: each tool_use answered once, in order.
        path = store.local_transcript(session_id)
        assert transcript_problems(path) == [], (n, transcript_problems(path))
        entries = [json.loads(line) for line in path.read_text().splitlines()]
        results_by_id = {
            b["tool_use_id"]: b
            for e in entries
            for b in (e.get("message") or {}).get("content") or []
            if isinstance(b, dict) and b.get("type") == "tool_result"
        }
        # No side-effecting tool ran twice: one marker per Bash call.
        lines = (marks / f"{n}.log").read_text().splitlines()
        ran = Counter(line.split()[1] for line in lines)
        assert all(n == 1 for n in ran.values()), lines
        for tool in {"b1", "b2"} - set(ran):  # started on the lost host before its shell ran
            assert "may have run" in str(results_by_id[tool]["content"]), lines
        # What the Read after the (possible) loss saw is the checkpoint's file, and the
        # submitter's workspace ends with the files the model left.
        read = results_by_id["r1"]["content"]
        read_text = read if isinstance(read, str) else json.dumps(read)
        log = (ws / "log.txt").read_text()
        if "two" in log:
            assert "two" in read_text
        else:
            lost_sessions += 1
            assert log == "one\n" and "two" not in read_text
            b2 = str(results_by_id["b2"]["content"])
            assert "may have run" in b2 or "lost" in json.dumps(entries), b2
        assert (ws / "result.txt").read_text() == f"{n} done\n"
    assert lost_sessions >= 1, "the kill hit no session in its pause"
    print(f"host lost: {lost_sessions} sessions lost a pause; all done {recovered:.1f}s after")

    store.db.close()


async def _from_a_fourth_home(
    tmp_path: Path,
    address: str,
    server: ReplayServer,
    task_queue: str,
    common: dict[str, str],
    results: list[tuple[str, Any, str]],
) -> None:
    """`list`, `status`, `tail` and `--resume` from a home that has only the store's URL and
    the Temporal address (the fleet's workers run the resumed prompt)."""
    fourth = process_env(tmp_path / "fourth", address, server.base_url, task_queue, **common)
    fourth.update(PYTHONPATH=str(ROOT), DURABLE_AGENT_NO_WORKER="1")
    elsewhere = tmp_path / "fourth" / "ws"
    elsewhere.mkdir(parents=True)
    listed = await asyncio.to_thread(_cli, ["list", "--json", "--limit", "100"], fourth, elsewhere)
    assert listed.returncode == 0, listed.stderr
    ids = {row["session_id"] for row in json.loads(listed.stdout)}
    assert {sid for _, _, sid in results} <= ids
    sid = results[1][2]
    status = await asyncio.to_thread(_cli, ["status", sid], fourth, elsewhere)
    assert status.returncode == 0 and "completed" in status.stdout, status
    tail = await asyncio.to_thread(_cli, ["tail", sid], fourth, elsewhere)
    assert tail.returncode == 0, tail
    resumed = await asyncio.to_thread(
        _cli, ["-p", "task 1 once more", "--resume", sid, "--output-format", "json"], fourth,
        elsewhere,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    answer = json.loads(resumed.stdout)
    assert answer["session_id"] == sid and answer["result"] == "done 1"
    assert "task 1 go" in json.dumps(server.requests[-1]["messages"])


async def _submit(n: int, submitter: Path, env: dict[str, str]) -> tuple[str, Any, str]:
    ws = submitter / f"ws{n}"
    ws.mkdir()
    (ws / "README.md").write_text(f"workspace {n}\n")
    prompt = f"task {n} go"
    if n % 2 == 0:
        args = ["run", prompt, "--workspace", str(ws), "--no-worker", "--output-format", "json",
                "--permission-mode", "acceptEdits", "--allowedTools", "Bash"]  # fmt: skip
        proc = await asyncio.to_thread(_cli, args, env, ws)
        sid = json.loads(proc.stdout.strip().splitlines()[-1])["session_id"] if proc.stdout else ""
        return "run", proc, sid
    p_env = {**env, "DURABLE_AGENT_NO_WORKER": "1"}
    args = ["-p", prompt, "--output-format", "json", "--permission-mode", "acceptEdits",
            "--allowedTools", "Bash"]  # fmt: skip
    proc = await asyncio.to_thread(_cli, args, p_env, ws)
    sid = json.loads(proc.stdout)["session_id"] if proc.stdout.strip() else ""
    return "-p", proc, sid


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_agent", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
