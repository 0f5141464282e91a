"""What the model is given before the conversation, in characters, beside what each part
covers; the baseline is the first request of the session before issue 24 (848 characters of
system prompt and tool descriptions, measured then on the same code path).

    uv run python bench/context_size.py [--workspace DIR]"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from durable_agent.engine.prompt import SYSTEM_PROMPT, environment_block  # noqa: E402
from durable_agent.engine.tools import TOOL_SPECS  # noqa: E402
from durable_agent.environment import gather  # noqa: E402

BEFORE = 848
"""System prompt and tool descriptions of the first request before issue 24, as the issue
measured them."""

COVERS = {
    "system prompt": "approach, tools, git, safety, reporting (" + ", ".join(
        line.removeprefix("# ") for line in SYSTEM_PROMPT.splitlines() if line.startswith("# ")
    ) + ")",
}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", default=".")
    opts = ap.parse_args()
    env = gather(Path(opts.workspace).resolve())
    block = environment_block(env, "claude-sonnet-4-5")
    rows = [("system prompt", len(SYSTEM_PROMPT), COVERS["system prompt"])]
    rows.append(("environment block", len(block), "directory, git, platform, date, model"))
    for spec in TOOL_SPECS.values():
        schema = spec.input_model.model_json_schema(by_alias=True)
        size = len(spec.description) + len(json.dumps(schema))
        rows.append((f"tool {spec.name}", size, "description + input schema"))
    for name, size, what in rows:
        print(f"{name:<20} {size:>7,} chars  {what}")
    described = len(SYSTEM_PROMPT) + sum(len(s.description) for s in TOOL_SPECS.values())
    total = sum(size for _, size, _ in rows)
    print(f"{'total':<20} {total:>7,} chars")
    print(
        f"system prompt + tool descriptions: {described:,} chars, "
        f"{described / BEFORE:.1f}x the {BEFORE} before issue 24"
    )


if __name__ == "__main__":
    main()
