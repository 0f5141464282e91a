"""Permission rules and modes, as Claude Code's public docs describe them: a pure matcher.

`check(tool_name, tool_input, ctx)` answers allow / ask / deny for one tool call, with the rule
(and its source) or the mode that decided, in one line the model and the user can read.
`headless(decision)` turns an ask into a deny for runs where nobody can answer. Nothing in this
package touches the filesystem (paths are compared lexically), and checking a Bash command takes
time linear in its length.

Where the docs leave a detail open the SAFER reading is chosen; each such choice is marked
"Safer reading:" where it is made.

The modules, lowest layer first (each imports only modules listed above it):

- `rules`: modes, rules and the permission context; the built-in tool tables; `parse_rule`;
  which rules apply to a tool; deny, then ask, then allow.
- `shell`: reads a command line with the tree-sitter-bash grammar and splits it into simple
  commands (`split_command`) within a work budget; here-document bodies are data.
- `paths`: path normalisation and gitignore-style path rules (`Read(...)`, `Edit(...)`),
  protected directories, the workspace boundary; the evaluation of file tools.
- `bash`: Bash commands against `Bash(...)` rules (wrappers, `sh -c`, redirections, acceptEdits'
  filesystem commands, commands too long to parse).
- `evaluate`: `check` and `headless`, `Decision`, the modes, and the other tools (WebFetch,
  agents, MCP).
- `grants`: session grants, what an "always for this session" answer allows.

Everything importers use is re-exported here.
"""

from durable_agent.engine.permissions.bash import _bash_pattern
from durable_agent.engine.permissions.evaluate import Decision, check, headless
from durable_agent.engine.permissions.grants import SessionGrant, grant_for, granted
from durable_agent.engine.permissions.paths import (
    PROTECTED_DIRS,
    PROTECTED_EXEMPT,
    normalize_path,
    read_denied,
    read_deny_roots,
)
from durable_agent.engine.permissions.rules import (
    AGENT_TOOLS,
    EDIT_TOOLS,
    KNOWN_TOOLS,
    READ_ONLY_TOOLS,
    READ_TOOLS,
    RULE_FAMILY,
    Behavior,
    PermissionContext,
    PermissionMode,
    PermissionRules,
    Rule,
    SandboxSpec,
    parse_rule,
)
from durable_agent.engine.permissions.shell import (
    Part,
    ShellParseError,
    TooComplex,
    Word,
    split_command,
)

__all__ = [
    "AGENT_TOOLS",
    "EDIT_TOOLS",
    "KNOWN_TOOLS",
    "PROTECTED_DIRS",
    "PROTECTED_EXEMPT",
    "READ_ONLY_TOOLS",
    "READ_TOOLS",
    "RULE_FAMILY",
    "Behavior",
    "Decision",
    "Part",
    "PermissionContext",
    "PermissionMode",
    "PermissionRules",
    "Rule",
    "SandboxSpec",
    "SessionGrant",
    "ShellParseError",
    "TooComplex",
    "Word",
    "_bash_pattern",
    "check",
    "grant_for",
    "granted",
    "headless",
    "normalize_path",
    "parse_rule",
    "read_denied",
    "read_deny_roots",
    "split_command",
]
