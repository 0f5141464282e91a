"""The Bash sandbox: a command line that runs a command under bubblewrap (`bwrap`, Linux).

Inside, the whole filesystem is read-only; the command may write only in the workspace, the
`--add-dir` folders and a private `/tmp`. The network is cut off unless the policy allows it.
Every path a `Read(...)` deny rule names is bound over — a file by an empty read-only file, a
directory by an empty read-only tmpfs — so no command can read it, not just the Read tool.

The flags, and why:
- `--ro-bind / /`: everything visible, nothing writable (HOME too: `touch ~/x` fails).
- `--dev /dev`, `--proc /proc`: fresh ones. The fresh /proc belongs to the new PID namespace, so
  `/proc/<worker pid>/root/...` cannot reach around a deny bind.
- `--tmpfs /tmp`: a private, empty /tmp that disappears with the command.
- `--bind DIR DIR` for the workspace and each writable folder, then the deny binds (after, so a
  denied path inside the workspace is covered too). Destinations are real paths: bubblewrap
  resolves an absolute symlink in a destination against its own setup root and fails, and a
  mount on the real path covers every symlinked way to it.
- `--unshare-net` (unless allowed): only a loopback of its own, so not even 127.0.0.1 of the host.
- `--unshare-pid`: the command is in its own PID namespace; when its init (bubblewrap) dies,
  the kernel kills everything left in it, background jobs and `setsid` children included.
- `--die-with-parent`: that init dies when the `bwrap` process we started is killed, so killing
  our process group (timeout, cancellation) ends the whole sandboxed tree.
- `--new-session`: no access to a controlling terminal (no TIOCSTI input injection).
- `--cap-drop ALL`: run as root, bubblewrap otherwise keeps every capability, and the command
  could simply `umount` a deny bind or remount / read-write.
The environment passes through unchanged (the run tag too, so `kill_tagged` still finds the
processes: the host's /proc shows them), and the working directory is kept.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

from pydantic import BaseModel, field_validator

from durable_agent.engine.permissions import (
    PermissionContext,
    SandboxSpec,
    read_denied,
    read_deny_roots,
)

BWRAP = "bwrap"
UNAVAILABLE = (
    "bubblewrap (bwrap) is not installed; install the Debian package bubblewrap, "
    "or turn the sandbox off (sandbox.enabled: false)"
)


class SandboxPolicy(BaseModel):
    workspace: str
    writable: list[str] = []
    """Folders the command may write besides the workspace (`--add-dir`)."""
    deny_read: list[str] = []
    """Absolute paths (files or directories) no command may read, resolved by the caller."""
    deny_write: list[str] = []
    """Absolute paths no command may change (`Edit(...)` deny rules), though writable around."""
    allow_network: bool = False

    @field_validator("deny_read", "deny_write")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        # A relative path would be resolved against the worker's directory, not the rule's:
        # it would protect some other file and say nothing.
        relative = [p for p in paths if not os.path.isabs(os.path.expanduser(p))]
        if relative:
            raise ValueError(f"deny_read paths must be absolute: {', '.join(relative)}")
        return paths


class SandboxUnavailable(RuntimeError):
    def __init__(self, message: str = UNAVAILABLE) -> None:
        super().__init__(message)


MAX_SCAN_ENTRIES = 200_000
"""How many files and folders a wildcard Read deny rule may make the sandbox look through."""


def policy_for(spec: SandboxSpec, ctx: PermissionContext | None, workspace: str) -> SandboxPolicy:
    """The policy of one sandboxed command (blocking: it looks for what the deny rules match,
    now, so a file created since the last command is covered too). A wildcard rule that would
    need more than MAX_SCAN_ENTRIES entries looked at raises SandboxUnavailable: the command
    does not run rather than run with the rule unenforced."""
    writable = [*(ctx.additional_directories if ctx else []), *spec.allow_write]
    deny = list(spec.deny_read)
    frozen = list(spec.deny_write)
    if ctx is not None:
        deny += _denied_paths(ctx, "Read")
        frozen += _denied_paths(ctx, "Edit")
    return SandboxPolicy(
        workspace=workspace,
        writable=writable,
        deny_read=deny,
        deny_write=frozen,
        allow_network=spec.allow_network,
    )


def _denied_paths(ctx: PermissionContext, family: str) -> list[str]:
    """The existing paths the `family` ("Read" or "Edit") deny rules match."""
    found: list[str] = []
    budget = MAX_SCAN_ENTRIES
    for root, exact in read_deny_roots(ctx, family):
        if exact:
            found.append(root)
            continue
        if root == "/":
            continue  # a rule on the whole Read tool names no path a mount could cover
        if read_denied(root, ctx, family):
            found.append(root)
            continue
        for folder, dirs, files in os.walk(root):
            budget -= len(dirs) + len(files)
            if budget < 0:
                raise SandboxUnavailable(
                    f"a {family} deny rule matches too widely to enforce in the sandbox (more "
                    f"than {MAX_SCAN_ENTRIES:,} entries under {root}); name the paths more "
                    f"narrowly"
                )
            for name in files:
                path = os.path.join(folder, name)
                if read_denied(path, ctx, family):
                    found.append(path)
            kept = []
            for name in dirs:
                path = os.path.join(folder, name)
                if read_denied(path, ctx, family):
                    found.append(path)  # covered whole: no need to look inside
                else:
                    kept.append(name)
            dirs[:] = kept
    return found


_empty_lock = threading.Lock()
_empty_path: str | None = None


def _empty_file() -> str:
    """A host file that is empty and read-only, bound over denied files. (Not /dev/null:
    bubblewrap mounts binds `nodev`, so a bound /dev/null cannot even be opened.)"""
    global _empty_path
    with _empty_lock:
        path = _empty_path
        if path is None or not _is_empty_file(path):
            folder = tempfile.mkdtemp(prefix="durable-agent-sandbox-")
            path = os.path.join(folder, "empty")
            with open(path, "wb"):
                pass
            os.chmod(path, 0o444)
            os.chmod(folder, 0o555)
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _empty_path = path
        return path


def _is_empty_file(path: str) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return os.path.isfile(path) and not os.path.islink(path) and st.st_size == 0


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _deny_targets(paths: list[str]) -> list[str]:
    """The real paths to cover, existing ones only, outermost first; a path inside another
    denied directory is covered already (and could not get a mount point in its read-only
    tmpfs). The given path needs no mount of its own: inside, it resolves through the same
    symlinks to the real one."""
    real = sorted(p for p in {_real(raw) for raw in paths} if os.path.exists(p))
    kept: list[str] = []
    for path in real:  # sorted: a parent comes before what is inside it
        if not any(os.path.isdir(k) and _inside(path, k) for k in kept):
            kept.append(path)
    return kept


def sandbox_argv(argv: list[str], policy: SandboxPolicy) -> list[str]:
    """The bwrap command line that runs `argv` under `policy`; SandboxUnavailable when
    bubblewrap is not on PATH."""
    bwrap = shutil.which(BWRAP)
    if bwrap is None:
        raise SandboxUnavailable()
    out = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    writable: list[str] = []
    for folder in [policy.workspace, *policy.writable]:
        real = _real(folder)
        if real not in writable and os.path.isdir(real):
            writable.append(real)
    for folder in writable:
        out += ["--bind", folder, folder]
    for path in _deny_targets(policy.deny_write):  # readable as they are, never changed
        out += ["--ro-bind", path, path]
    for path in _deny_targets(policy.deny_read):
        if os.path.isdir(path):
            out += ["--tmpfs", path, "--remount-ro", path]
        else:
            out += ["--ro-bind", _empty_file(), path]
    if not policy.allow_network:
        out.append("--unshare-net")
    out += ["--unshare-pid", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--"]
    return out + argv
