"""The CLI's stop on SIGTERM/SIGINT (durable_agent/cli/stopping.py), each case in a process of
its own that signals itself: before the session opens the CLI ends at once; while it opens the
signal is held (a session whose start is on its way is then stopped, never left behind); once
it is open the work is cancelled for the stop; a second signal ends the process at once."""

import subprocess
import sys
import textwrap

from tests.test_cli import ROOT

PRELUDE = """
import asyncio, os, signal
from durable_agent.cli.stopping import Stops, Stopped

def term():
    os.kill(os.getpid(), signal.SIGTERM)

async def work():
    print("work ran", flush=True)
    await asyncio.sleep(10)
    return "done"
"""


def _run(body: str) -> subprocess.CompletedProcess[str]:
    script = PRELUDE + "\nasync def main():\n" + textwrap.indent(textwrap.dedent(body), "    ")
    script += "\nasyncio.run(main())\nprint('exited normally', flush=True)\n"
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_a_signal_before_the_session_opens_ends_the_cli_at_once():
    done = _run("""
        stops = Stops()
        term()
        await asyncio.sleep(2)
        print("not reached", flush=True)
    """)
    assert done.returncode == 143 and done.stdout == "", done.stderr


def test_a_signal_while_the_session_opens_is_held_and_the_work_never_starts():
    done = _run("""
        stops = Stops()
        stops.hold()
        term()
        await asyncio.sleep(0.2)  # the start, on its way
        print("opened", flush=True)
        outcome = await stops.around(work())
        print(type(outcome).__name__, outcome.exit_code, flush=True)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["opened", "Stopped 143", "exited normally"]


def test_a_signal_during_the_work_cancels_it_and_a_second_one_ends_the_process():
    done = _run("""
        stops = Stops()
        stops.hold()
        asyncio.get_running_loop().call_later(0.3, term)
        outcome = await stops.around(work())
        print(type(outcome).__name__, outcome.exit_code, flush=True)
        os.kill(os.getpid(), signal.SIGINT)  # while the stop runs
        await asyncio.sleep(2)
        print("not reached", flush=True)
    """)
    assert done.returncode == 143, done.stderr  # the first signal's code
    assert done.stdout.splitlines() == ["work ran", "Stopped 143"]


def test_work_that_ends_first_gives_its_result():
    done = _run("""
        async def quick():
            return "done"
        outcome = await Stops(opened=True).around(quick())
        print(outcome, flush=True)
    """)
    assert done.returncode == 0 and done.stdout.splitlines() == ["done", "exited normally"]
