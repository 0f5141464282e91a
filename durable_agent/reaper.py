"""Ends what a worker process started when that process dies: its tool runs, hooks, MCP servers.

Each tool or hook process is started in a session of its own (so that its process group can be
killed whole), and so survives a worker killed under it (SIGKILL, the OOM killer, a crash). On
the same machine, a takeover ends a lost attempt's processes by their run tag (`kill_tagged`);
a session taken over on another machine could not, and the command went on with its side
effects while the model, told it "may have run", might start it again. So the first tool a
worker process starts also starts this reaper: a process of its own (stdlib only, run as a
script) holding the read end of a pipe whose write end only the worker holds. The pipe
reaches end-of-file when the worker is gone, whatever killed it; the reaper then SIGKILLs
every process whose environment names that worker (`DA_TOOL_WORKER=<pid>.<start time>`, set in
every tool's, hook's and MCP server's environment), scanning /proc as `kill_tagged` does.

A worker that exits on purpose (drained, the CLI done, a recycle's exec) first writes one byte
down the pipe (`stand_down`): the reaper then leaves everything as it is, as before there was a
reaper (a session's own end still ends its processes). In the sandbox, bubblewrap's
`--die-with-parent` already ends a sandboxed tree with its worker; the reaper also covers
unsandboxed tools, hooks and stdio MCP servers.

    python reaper.py FD WORKER_TAG    # FD: the pipe's read end, inherited
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

WORKER_TAG_NAME = "DA_TOOL_WORKER"
KILL_SCANS = 3
KILL_RESCAN_SECONDS = 0.02


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name (which may hold spaces and
    parentheses): the state first. None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def scan_environ(needles: tuple[bytes, ...], prefix: bool) -> list[tuple[int, str]]:
    """Live processes of this machine whose environment holds one of `needles` (`NAME=value`
    entries; with `prefix`, an entry that starts with one), each with the matched entry's value."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for e in environ.split(b"\0"):
            if e.startswith(needles) if prefix else e in needles:
                found.append((int(entry.name), e.partition(b"=")[2].decode(errors="replace")))
                break
    return found


def kill_scanned(needles: tuple[bytes, ...], prefix: bool = False) -> int:
    """SIGKILL every process `scan_environ` finds, scanning more than once: a process in the
    middle of exec shows an empty environment for a moment, and one may fork a child just
    before it is killed. How many."""
    killed: set[int] = set()
    for scan in range(KILL_SCANS):
        if scan:
            time.sleep(KILL_RESCAN_SECONDS)  # between scans, not after the last
        pids = [p for p, _ in scan_environ(needles, prefix) if p != os.getpid() and p not in killed]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed.update(pids)
    return len(killed)


def main(argv: list[str]) -> int:
    fd, worker = int(argv[0]), argv[1]
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # only the worker's end ends this process
    while True:
        try:
            told = os.read(fd, 1)
            break
        except InterruptedError:
            continue
        except OSError:
            told = b""
            break
    if told:  # the worker stood down: it exits on purpose and leaves its processes be
        return 0
    kill_scanned((f"{WORKER_TAG_NAME}={worker}".encode(),))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
