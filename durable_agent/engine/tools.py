"""Tool specs (Claude Code's names and input schemas) and `partition_tool_calls`."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from durable_agent.engine.bash_safety import is_read_only_command
from durable_agent.engine.messages import ToolUseBlock
from durable_agent.engine.schedules import (
    MAX_REASON_CHARS,
    MAX_SCHEDULED_PROMPT_CHARS,
    cron_problem,
)


class ToolName(StrEnum):
    """The built-in tools, by Claude Code's names (what the model calls and settings match)."""

    READ = "Read"
    WRITE = "Write"
    EDIT = "Edit"
    BASH = "Bash"
    GREP = "Grep"
    GLOB = "Glob"
    WEB_FETCH = "WebFetch"
    NOTEBOOK_EDIT = "NotebookEdit"
    SKILL = "Skill"
    TODO_WRITE = "TodoWrite"
    AGENT = "Agent"
    TASK_STOP = "TaskStop"
    SCHEDULE_WAKEUP = "ScheduleWakeup"
    CRON_CREATE = "CronCreate"
    CRON_LIST = "CronList"
    CRON_DELETE = "CronDelete"


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ReadInput(_Input):
    file_path: str = Field(
        description="Path of the file to read (absolute, or relative to the workspace)"
    )
    offset: int | None = Field(
        default=None, ge=1, description="Line number to start reading from (1-based)"
    )
    limit: int | None = Field(default=None, ge=1, description="Number of lines to read")


class WriteInput(_Input):
    file_path: str = Field(description="Path of the file to write")
    content: str = Field(description="The content to write to the file")


class EditInput(_Input):
    file_path: str = Field(description="Path of the file to modify")
    old_string: str = Field(description="The exact text to replace")
    new_string: str = Field(description="The text to replace it with (must differ from old_string)")
    replace_all: bool = Field(default=False, description="Replace every occurrence of old_string")


class BashInput(_Input):
    command: str = Field(description="The shell command to run in the workspace")
    timeout: int | None = Field(
        default=None, ge=1, le=600_000, description="Timeout in milliseconds (max 600000)"
    )
    description: str | None = Field(
        default=None, description="What the command does, in 5-10 words"
    )


class GrepInput(_Input):
    pattern: str = Field(description="Regular expression to search for")
    path: str | None = Field(
        default=None, description="File or directory to search (default: the workspace)"
    )
    glob: str | None = Field(
        default=None, description='Glob that file names must match, e.g. "*.py"'
    )
    type: str | None = Field(default=None, description='File type to search, e.g. "py", "js"')
    output_mode: Literal["content", "files_with_matches", "count"] = Field(
        default="files_with_matches", description="What to show"
    )
    case_insensitive: bool = Field(default=False, alias="-i", description="Case-insensitive search")
    line_numbers: bool = Field(
        default=False, alias="-n", description="Show line numbers (content mode)"
    )
    after: int | None = Field(
        default=None, ge=0, alias="-A", description="Lines of context after a match"
    )
    before: int | None = Field(
        default=None, ge=0, alias="-B", description="Lines of context before a match"
    )
    context: int | None = Field(
        default=None, ge=0, alias="-C", description="Lines of context around a match"
    )
    head_limit: int | None = Field(
        default=None, ge=1, description="Show only the first N lines/entries"
    )


class GlobInput(_Input):
    pattern: str = Field(description='Glob pattern, e.g. "**/*.py"')
    path: str | None = Field(
        default=None, description="Directory to search in (default: the workspace)"
    )


class WebFetchInput(_Input):
    url: str = Field(
        max_length=2000,
        description="The page's full URL, http:// or https:// (http is upgraded to https)",
        json_schema_extra={"format": "uri"},
    )
    prompt: str = Field(min_length=1, description="What to find out from the page")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be a full http:// or https:// URL")
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not hold a user name or password")
        return value.strip()


class NotebookEditInput(_Input):
    notebook_path: str = Field(description="Absolute path of the Jupyter notebook (.ipynb)")
    cell_id: str | None = Field(
        default=None,
        description="Id of the cell to replace or delete (as Read shows it; cell-N, counting "
        "from 0, where cells have no ids). For insert: the new cell goes after this cell, or "
        "first when cell_id is omitted",
    )
    new_source: str = Field(description="The cell's new source (ignored by delete)")
    cell_type: Literal["code", "markdown"] | None = Field(
        default=None,
        description="The cell's type: required for insert; for replace, changes it (default: "
        "as it was)",
    )
    edit_mode: Literal["replace", "insert", "delete"] = Field(
        default="replace", description="replace (default), insert or delete"
    )


class SkillInput(_Input):
    skill: str = Field(description='The name of the skill to load, as listed (e.g. "pdf")')


class TodoItem(BaseModel):
    """One task of the model's todo list (Claude Code's fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str = Field(min_length=1, max_length=500, description='The task: "Run the tests"')
    status: Literal["pending", "in_progress", "completed"]
    activeForm: str = Field(  # noqa: N815 (Claude Code's name)
        min_length=1, max_length=500, description='The task as it is done: "Running the tests"'
    )


class TodoWriteInput(_Input):
    todos: list[TodoItem] = Field(
        max_length=100, description="The whole list as it is now (it replaces the last one)"
    )


class AgentInput(_Input):
    """The Agent tool's input (Claude Code's fields)."""

    description: str = Field(min_length=1, max_length=200, description="The task in 3-5 words")
    prompt: str = Field(min_length=1, description="The whole task for the agent to carry out")
    subagent_type: str = Field(
        default="general-purpose", description="Which kind of agent (see the list)"
    )
    model: str | None = Field(
        default=None, description="A model for this agent only (haiku, sonnet, opus or an id)"
    )
    run_in_background: bool | None = Field(
        default=None,
        description="Run it in the background: you go on at once, and its report comes to "
        "you in a message when it finishes (stop it with TaskStop)",
    )


class TaskStopInput(_Input):
    task_id: str = Field(min_length=1, description="The id of the background agent to stop")


class ScheduleWakeupInput(_Input):
    """Claude Code's fields; the delay is clamped (engine/schedules.py), never refused."""

    delaySeconds: int = Field(  # noqa: N815 (Claude Code's name)
        description="Seconds from now until the session wakes up (60 to 3600; others are "
        "clamped to that range)"
    )
    reason: str = Field(
        min_length=1, max_length=MAX_REASON_CHARS, description="Why you wake up then, in a line"
    )
    prompt: str = Field(
        min_length=1,
        max_length=MAX_SCHEDULED_PROMPT_CHARS,
        description="The prompt the session runs when it wakes up",
    )


class CronCreateInput(_Input):
    """Claude Code's fields (`durable` is accepted: every job here survives restarts)."""

    cron: str = Field(
        description="A 5-field cron expression in the worker's local time: minute hour "
        'day-of-month month day-of-week, e.g. "*/5 * * * *", "7 9 * * 1-5"'
    )
    prompt: str = Field(
        min_length=1,
        max_length=MAX_SCHEDULED_PROMPT_CHARS,
        description="The prompt the session runs each time the job fires",
    )
    recurring: bool = Field(
        default=True, description="true (default): every match; false: once, at the next match"
    )
    durable: bool = Field(
        default=True,
        description="Ignored: every job here is kept by Temporal and survives restarts",
    )

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        problem = cron_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return " ".join(value.split())


class CronListInput(_Input):
    pass


class CronDeleteInput(_Input):
    id: str = Field(min_length=1, description="The job's id, as CronCreate or CronList gave it")


@functools.cache
def _schema_json(model: type[BaseModel]) -> str:
    return json.dumps(model.model_json_schema(by_alias=True))


def request_json(value: Any) -> str:
    """`value` in the SDK's JSON encoding of a request body: compact, UTF-8, no NaN."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


_ENCODED_TOOLS: dict[int, str] = {}
"""request_json of each shared `tools` entry (ToolSpec.api_tool's), by the entry's id: each
lives as long as the process (held by _api_tool's cache), so no other object takes its id."""


def encoded_tool(entry: dict[str, Any]) -> str | None:
    """The JSON of a shared `tools` entry, encoded once; None for any other dict."""
    return _ENCODED_TOOLS.get(id(entry))


class ToolSpec(BaseModel):
    """What the engine knows about a tool without running it."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    description: str
    input_model: type[_Input]
    read_only: bool
    concurrency_safe: bool
    summary_field: str

    def json_schema(self) -> dict[str, Any]:
        """The input's JSON schema: generated once per model (pydantic takes milliseconds over
        it, and every request lists every tool), a fresh copy each call."""
        return json.loads(_schema_json(self.input_model))

    def api_tool(self) -> dict[str, Any]:
        """The tool's entry in a Messages API request's `tools`: the same object at every call
        (every request lists every tool: built and encoded once, `encoded_tool`), so never to
        be changed — a caller that changes a field changes a copy."""
        return _api_tool(self)

    def parse(self, raw: dict[str, Any]) -> _Input:
        return self.input_model.model_validate(raw)

    def is_concurrency_safe(self, raw: dict[str, Any]) -> bool:
        """Safe to run beside others; invalid input counts as unsafe."""
        try:
            args = self.parse(raw)
        except ValidationError:
            return False
        if isinstance(args, BashInput):
            return is_read_only_command(args.command)
        return self.concurrency_safe

    def is_read_only(self, raw: dict[str, Any]) -> bool:
        """Changes nothing (for this input): may be retried, and may start early."""
        if self.name == ToolName.BASH:
            return self.is_concurrency_safe(raw)
        return self.read_only

    def summary(self, raw: dict[str, Any]) -> str:
        """One line for the UI: "Bash: git status"."""
        value = str(raw.get(self.summary_field, "")).strip().splitlines()
        first = value[0] if value else ""
        if len(first) > 80:
            first = first[:77] + "..."
        return f"{self.name}: {first}" if first else self.name


@functools.cache
def _api_tool(spec: ToolSpec) -> dict[str, Any]:
    entry = {"name": spec.name, "description": spec.description, "input_schema": spec.json_schema()}
    _ENCODED_TOOLS[id(entry)] = request_json(entry)
    return entry


TOOL_SPECS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            name=ToolName.READ,
            description="Read a text file. Paths are absolute or relative to the workspace. "
            "Returns up to 2000 lines from `offset` (1-based; default the start), each prefixed "
            "with its line number and a tab (cat -n style: the prefix is not part of the file); "
            "lines over 2000 characters are cut. For a large file read the part you need with "
            "offset/limit, or find it first with Grep. Reading several files at once in "
            "parallel calls is fine. Binary files are refused; to list a folder use Glob. A "
            'Jupyter notebook (.ipynb) shows as its cells, `<cell id="…" type="code">source'
            "</cell>` with their text outputs (offset/limit show its JSON lines instead).",
            input_model=ReadInput,
            read_only=True,
            concurrency_safe=True,
            summary_field="file_path",
        ),
        ToolSpec(
            name=ToolName.WRITE,
            description="Write a whole file, creating it (and its folders) or replacing what is "
            "there. To change part of an existing file use Edit instead, which keeps the rest "
            "exactly; read an existing file before you replace it. Do not create documentation "
            "or helper files the task does not ask for.",
            input_model=WriteInput,
            read_only=False,
            concurrency_safe=False,
            summary_field="file_path",
        ),
        ToolSpec(
            name=ToolName.EDIT,
            description="Replace exact text in a file: old_string must occur exactly once "
            "(include enough surrounding lines to make it unique) unless replace_all is true "
            "(every occurrence, e.g. renaming a variable). Copy old_string from Read's output "
            "without the line-number prefix, indentation exact. new_string must differ. Read "
            "the file first; prefer several small Edits to rewriting the file.",
            input_model=EditInput,
            read_only=False,
            concurrency_safe=False,
            summary_field="file_path",
        ),
        ToolSpec(
            name=ToolName.BASH,
            description="Run a shell command (bash) in the workspace and return its combined "
            "output and exit code. For tests, builds, git, package managers: not for reading "
            "or searching files (Read, Grep, Glob do that better). Timeout 2 minutes by "
            "default (`timeout` in ms, at most 600000). Long output keeps its start and end. "
            "Non-interactive: pass flags like -y or --no-pager. Chain dependent steps with && "
            "in one call; independent commands can be parallel calls. A command left running "
            "in the background (`cmd &`) is ended when the session ends.",
            input_model=BashInput,
            read_only=False,
            concurrency_safe=False,
            summary_field="command",
        ),
        ToolSpec(
            name=ToolName.GREP,
            description="Search file contents with a regular expression (ripgrep syntax: "
            "escape literal braces and dots, e.g. `interface\\{\\}`). output_mode: "
            "files_with_matches (default: the paths), content (matching lines; -n for line "
            'numbers, -A/-B/-C for context), count. Narrow it with `glob` (e.g. "*.py") or '
            "`type` (py, js, ...) and `path`; `head_limit` caps the output. .git is skipped "
            "(and, with ripgrep, what .gitignore names).",
            input_model=GrepInput,
            read_only=True,
            concurrency_safe=True,
            summary_field="pattern",
        ),
        ToolSpec(
            name=ToolName.GLOB,
            description='Find files by name with a glob pattern ("**/*.py", '
            '"src/**/test_*.ts"); the newest first, at most 100. Use it to locate files '
            "before reading them; use Grep to search their contents.",
            input_model=GlobInput,
            read_only=True,
            concurrency_safe=True,
            summary_field="pattern",
        ),
        ToolSpec(
            name=ToolName.WEB_FETCH,
            description="Fetch a web page and answer a question about it. `url` is a full "
            "http(s) URL (http is upgraded to https) the user gave or a result or page "
            "named; do not guess URLs. `prompt` says what to find out. The page is turned into "
            "markdown and a small, fast model reads it and answers the prompt: the result is "
            "that answer, which may summarise the page or leave parts out, not the page "
            "itself; ask for exact text when you need it. HTML and text only (binary files "
            "are refused); a page longer than about 100,000 characters is cut; 30 s timeout; "
            "pages behind a login cannot be read. A page fetched in the last 15 minutes is "
            "read again from a cache, so another question about it is quick. A redirect to "
            "the same host is followed; one to another host is not: the result gives the new "
            "URL, and you call WebFetch again with it.",
            input_model=WebFetchInput,
            read_only=True,
            concurrency_safe=True,
            summary_field="url",
        ),
        ToolSpec(
            name=ToolName.NOTEBOOK_EDIT,
            description="Change one cell of a Jupyter notebook (.ipynb) without touching its "
            "JSON: replace the cell's source (edit_mode replace, the default), insert a new "
            "cell (insert: cell_type required; it goes after the cell cell_id names, or first "
            "without cell_id) or delete the cell (delete). Read the notebook first: it shows "
            "every cell with its id (cell-N, counting from 0, in a notebook whose cells have "
            "none). A replaced code cell loses its outputs and execution count; the other "
            "cells, the metadata and the file's layout stay. Use it rather than Edit or Write "
            "on a notebook; it does not run cells. Example: "
            '{"notebook_path": "/abs/analysis.ipynb", "cell_id": "1f3a9c2e", '
            '"new_source": "df.describe()"}.',
            input_model=NotebookEditInput,
            read_only=False,
            concurrency_safe=False,
            summary_field="notebook_path",
        ),
        ToolSpec(
            name=ToolName.SKILL,
            # A request lists the session's skills here (engine/skills.py), and sends no Skill
            # tool when there are none.
            description="Load a skill's instructions by its name.",
            input_model=SkillInput,
            read_only=True,
            concurrency_safe=True,
            summary_field="skill",
        ),
    )
}


TOOL_SPECS[ToolName.TODO_WRITE] = ToolSpec(
    name=ToolName.TODO_WRITE,
    description="Keep a todo list for this task: each call gives the whole list as it is "
    "now. Use it for work of three or more steps, or when the user gives several tasks: "
    "write the steps first, mark one in_progress before you start it (one at a time) and "
    "completed as soon as it is done (not in batches), add tasks you discover, remove ones "
    "that no longer apply. Mark a task completed only when it is fully done: tests pass, "
    "nothing left unfinished; otherwise keep it in_progress and add what blocks it. Skip the "
    'list for a single small step or a question. Each item: content (imperative, "Run the '
    'tests"), activeForm ("Running the tests"), status (pending, in_progress, completed).',
    input_model=TodoWriteInput,
    read_only=True,
    concurrency_safe=False,
    summary_field="",
)


TOOL_SPECS[ToolName.AGENT] = ToolSpec(
    name=ToolName.AGENT,
    description="Start a sub-agent (its description in a request lists the agents there are).",
    input_model=AgentInput,
    read_only=False,
    concurrency_safe=True,  # several in one message run at once
    summary_field="description",
)


TOOL_SPECS[ToolName.SCHEDULE_WAKEUP] = ToolSpec(
    name=ToolName.SCHEDULE_WAKEUP,
    description="Continue this session later: after delaySeconds (60 to 3600) the session "
    "wakes up and runs `prompt` as a new prompt, with this conversation. Use it to check back "
    "on something that takes time outside this session (a CI run, a deploy); say in `reason` "
    "why. It does not wait now: end your turn after it. The wake-up survives restarts; the "
    "user can see and cancel it (`durable-agent status`).",
    input_model=ScheduleWakeupInput,
    read_only=True,  # the session keeps it only once the call ran; the tool only answers
    concurrency_safe=True,
    summary_field="reason",
)
TOOL_SPECS[ToolName.CRON_CREATE] = ToolSpec(
    name=ToolName.CRON_CREATE,
    description="Schedule a prompt for this session on a cron schedule (5 fields in the "
    "worker's local time: minute hour day-of-month month day-of-week). recurring (default "
    "true) runs it at every match, for at most 7 days; recurring false runs it once, at the "
    'next match (for "remind me at 3pm"). A job fires only between prompts, never during '
    "one; it ends with the session. When the time is approximate, prefer a minute other than "
    ":00 and :30. Returns the job's id (CronDelete cancels it).",
    input_model=CronCreateInput,
    read_only=False,  # it creates a schedule: never started early, never re-run blindly
    concurrency_safe=False,
    summary_field="cron",
)
TOOL_SPECS[ToolName.CRON_LIST] = ToolSpec(
    name=ToolName.CRON_LIST,
    description="List this session's cron jobs: id, schedule, next run, prompt.",
    input_model=CronListInput,
    read_only=True,
    concurrency_safe=True,
    summary_field="",
)
TOOL_SPECS[ToolName.CRON_DELETE] = ToolSpec(
    name=ToolName.CRON_DELETE,
    description="Cancel one of this session's cron jobs by its id.",
    input_model=CronDeleteInput,
    read_only=False,
    concurrency_safe=False,
    summary_field="id",
)


TOOL_SPECS[ToolName.TASK_STOP] = ToolSpec(
    name=ToolName.TASK_STOP,
    description="Stop a background agent (started with Agent and run_in_background) that is "
    "no longer needed, by the task id its start gave you. Its report says it was stopped.",
    input_model=TaskStopInput,
    read_only=False,
    concurrency_safe=False,
    summary_field="task_id",
)


def tool_is_concurrency_safe(block: ToolUseBlock, specs: dict[str, ToolSpec] = TOOL_SPECS) -> bool:
    """Unknown tools, invalid input and a raising safety check all count as unsafe."""
    spec = specs.get(block.name)
    if spec is None:
        return False
    try:
        return spec.is_concurrency_safe(block.input)
    except Exception:
        return False


class Batch(BaseModel):
    """Tool calls that run together: a parallel group of safe calls, or one unsafe call."""

    concurrency_safe: bool
    blocks: list[ToolUseBlock]


def partition_tool_calls(
    blocks: Sequence[ToolUseBlock],
    is_safe: Callable[[ToolUseBlock], bool] = tool_is_concurrency_safe,
) -> list[Batch]:
    """Consecutive concurrency-safe calls form one batch; anything else runs alone."""
    batches: list[Batch] = []
    for block in blocks:
        try:
            safe = bool(is_safe(block))
        except Exception:
            safe = False
        if safe and batches and batches[-1].concurrency_safe:
            batches[-1].blocks.append(block)
        else:
            batches.append(Batch(concurrency_safe=safe, blocks=[block]))
    return batches
