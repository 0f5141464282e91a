"""Malformed stream-json on the drop-in front-end's stdin: one line on stderr naming the stdin
line and what is wrong with it, and (stream-json output) an error `result` line to end the
stream, never "a bug in durable-agent" nor a silent exit."""

from __future__ import annotations

import json
import subprocess

import pytest

from durable_agent.cli.claude_input import InputError, parse_line
from durable_agent.replay import ReplayServer
from tests.test_claude_cli import env_for, workspace
from tests.test_cli import assert_clean_error

USER = b'{"type": "user", "message": {"role": "user", "content": "%s"}}\n'

CASES = [
    pytest.param(b"[1,2,3]\n", "stdin: line 1 is a JSON array, not an object", id="array"),
    pytest.param(USER % b"caf\xe9", "stdin: line 1 is not UTF-8 (byte 0xe9", id="not-utf8"),
    pytest.param(USER % b"\\ud800", "stdin: line 1 holds an unpaired surrogate", id="surrogate"),
    pytest.param(
        b"[" * 200_000 + b"]" * 200_000 + b"\n", "stdin: line 1 is nested too deeply", id="deep"
    ),
    pytest.param(b"", "stdin: it is empty", id="empty"),
    pytest.param(b"\n  \n", "stdin: it held only blank lines", id="blank"),
    pytest.param(b'{"type": "user"\n', "stdin: line 1 is not JSON", id="not-json"),
    pytest.param(b'{"type": "bogus"}\n', "stdin: line 1: unknown message type 'bogus'", id="bogus"),
]


@pytest.mark.parametrize(("stdin", "needle"), CASES)
def test_a_malformed_stdin_line_ends_with_one_line_and_an_error_result(
    dev_env, tmp_path, stdin, needle
):
    with ReplayServer([]) as server:
        proc = subprocess.run(
            ["durable-agent", "-p", "--input-format", "stream-json",
             "--output-format", "stream-json", "--verbose"],
            input=stdin, cwd=workspace(tmp_path), env=env_for(dev_env, tmp_path, server),
            capture_output=True, timeout=120,
        )  # fmt: skip
    result = subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    )
    assert_clean_error(result, needle)
    assert "bug in durable-agent" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2  # the error and its hint
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["system", "result"]
    end = lines[-1]
    assert end["subtype"] == "error_during_execution" and end["is_error"] is True
    assert needle in end["errors"][0] and end["session_id"] == lines[0]["session_id"]
    assert {"duration_ms", "num_turns", "total_cost_usd", "usage", "uuid"} <= end.keys()
    assert server.requests == []


def test_a_nested_object_within_reach_is_read():
    deep = b'{"type": "user", "x": ' + b"[" * 500 + b"]" * 500 + b"}"
    assert parse_line(deep, 1) is not None
    with pytest.raises(InputError, match="line 3 is a JSON number"):
        parse_line(b"3\n", 3)
