"""What a tool could read of another process's secrets: `python secret_probe.py PID` prints every
`probe-secret-…` value it finds in PID's environment (/proc/PID/environ), in every process's
(/proc/*/environ), in `ps axeww` and in PID's memory (/proc/PID/mem), and how each read went.
Standard library only: it runs under any Python, as any user, inside the sandbox too."""

from __future__ import annotations

import glob
import re
import subprocess
import sys

NEEDLE = re.compile(rb"probe-secret-[\w-]+")
REGION_LIMIT = 1 << 28  # a larger mapping is address space reserved, not data


def finds(data: bytes) -> list[str]:
    return sorted({m.decode() for m in NEEDLE.findall(data)})


def read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def memory(pid: str) -> str:
    try:
        mem = open(f"/proc/{pid}/mem", "rb")  # noqa: SIM115
    except OSError as exc:
        return f"denied ({exc.strerror})"
    found: set[str] = set()
    with mem, open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            span, perms = line.split()[:2]
            start, end = (int(x, 16) for x in span.split("-"))
            if perms[0] != "r" or end - start > REGION_LIMIT:
                continue
            try:
                mem.seek(start)
                found.update(finds(mem.read(end - start)))
            except (OSError, OverflowError, ValueError):
                continue
    return f"read {sorted(found)}"


def main(pid: str) -> None:
    environ = read(f"/proc/{pid}/environ")
    print("parent environ:", "unreadable" if environ is None else finds(environ))
    every = b"\n".join(read(p) or b"" for p in glob.glob("/proc/[0-9]*/environ"))
    print("all environ:", finds(every))
    ps = subprocess.run(["ps", "axeww"], capture_output=True, check=False)
    print("ps:", finds(ps.stdout))
    print("mem:", memory(pid))


if __name__ == "__main__":
    main(sys.argv[1])
