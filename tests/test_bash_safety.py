import pytest

from durable_agent.engine.bash_safety import is_read_only_command
from durable_agent.engine.tools import TOOL_SPECS


@pytest.mark.parametrize(
    "command",
    ["ls -la", "git status", "git log --oneline | head -5", "cat a.txt | grep x | wc -l",
     "find . -name '*.py'", "sleep 1.5", "rg -n TODO src"],
)  # fmt: skip
def test_read_only(command):
    assert is_read_only_command(command)
    assert TOOL_SPECS["Bash"].is_concurrency_safe({"command": command})
    assert TOOL_SPECS["Bash"].is_read_only({"command": command})


@pytest.mark.parametrize(
    "command",
    ["rm -rf x", "echo hi > f", "ls; rm f", "ls && touch f", "git commit -m x", "git push",
     "find . -delete", "find . -exec rm {} +", "cat $(ls)", "echo `id`", "python3 x.py",
     "ls &", "sort -o out in", "cat 'unterminated", "", "git"],
)  # fmt: skip
def test_side_effects(command):
    assert not is_read_only_command(command)
    assert not TOOL_SPECS["Bash"].is_concurrency_safe({"command": command})
