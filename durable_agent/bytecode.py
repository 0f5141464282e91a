"""Bytecode under PYTHONDONTWRITEBYTECODE (common in CI images): without a cache every start
compiles every module it imports from source (anthropic alone: 1.4 s, twice the time the whole
CLI may take to its first request). When the dependencies were not compiled at install
(`uv sync --compile-bytecode`, `UV_COMPILE_BYTECODE=1` as infra/Dockerfile does), durable-agent
keeps its bytecode in `$DURABLE_AGENT_HOME/pycache` (Python's own `sys.pycache_prefix`), not in
the source tree or site-packages, which the variable is there to keep clean, or in
PYTHONPYCACHEPREFIX when that is set. DURABLE_AGENT_BYTECODE_CACHE=0 turns it off. Under a
file-size limit no bytecode is written at all (`_file_size_limited`). Imported first of all
(durable_agent/__init__): only the standard library, nothing else."""

from __future__ import annotations

import os
import sys

OUR_WITNESS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "workflows", "query.py"
)
"""Our own workflow module: the sandbox imports it afresh for every workflow it starts (tens of
ms from source, each time). durable-agent runs from its checkout (an editable install):
`uv sync --compile-bytecode` compiles the dependencies, not it. (os.path, not pathlib: this
module is imported at every start, and most starts have nothing for it to do.)"""


def _compiled_at_install(package: str = "anthropic") -> bool:
    """The heaviest dependency (the others are installed alike) and our own code have bytecode
    beside them."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    sources = [OUR_WITNESS] if os.path.exists(OUR_WITNESS) else []
    if spec is not None and spec.origin is not None:
        sources.append(spec.origin)
    return all(os.path.exists(importlib.util.cache_from_source(p)) for p in sources)


def _file_size_limited() -> bool:
    """A limit on file size (`ulimit -f`) can cut a .pyc short: Python writes one in a single
    write() and renames it into place even when the write was partial, and a truncated .pyc
    then fails every later import of its module ("marshal data too short")."""
    try:
        import resource
    except ImportError:  # not POSIX
        return False
    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY


def cache_bytecode_in_state_dir() -> None:
    if _file_size_limited():
        sys.dont_write_bytecode = True  # what it would write could break the next start
        return
    if not sys.dont_write_bytecode:  # Python keeps its own
        return
    if os.environ.get("DURABLE_AGENT_BYTECODE_CACHE") == "0" or _compiled_at_install():
        return
    if sys.pycache_prefix:  # PYTHONPYCACHEPREFIX: the place the user keeps bytecode
        sys.dont_write_bytecode = False
        return
    from durable_agent.paths import state_home

    home = state_home()
    try:
        (home / "pycache").mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # a read-only home: go without, as asked
    sys.pycache_prefix = str(home / "pycache")
    sys.dont_write_bytecode = False
