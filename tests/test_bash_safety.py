import pytest

from durable_agent.engine.bash_safety import is_read_only_command
from durable_agent.engine.tools import TOOL_SPECS


@pytest.mark.parametrize(
    "command",
    ["ls -la", "git status", "git log --oneline | head -5", "cat a.txt | grep x | wc -l",
     "find . -name '*.py'", "sleep 1.5", "rg -n TODO src", "uniq a", "uniq -c", "sort -n a",
     "sort -r a | uniq -c", "date", "date +%s", "date -u +%F", "date -d yesterday +%F",
     "tree -L 2", "git diff HEAD~1", "printenv PATH", "find . -type f -print"],
)  # fmt: skip
def test_read_only(command):
    assert is_read_only_command(command)
    assert TOOL_SPECS["Bash"].is_concurrency_safe({"command": command})
    assert TOOL_SPECS["Bash"].is_read_only({"command": command})


@pytest.mark.parametrize(
    "command",
    ["rm -rf x", "echo hi > f", "ls; rm f", "ls && touch f", "git commit -m x", "git push",
     "find . -delete", "find . -exec rm {} +", "cat $(ls)", "echo `id`", "python3 x.py",
     "ls &", "sort -o out in", "cat 'unterminated", "", "git",
     # wrappers run another program: never read-only, whatever they wrap
     "env bash side.sh", "env", "env ls", "nice ls", "ionice ls", "timeout 5 ls", "xargs rm",
     "ls | xargs rm", "sudo ls", "doas ls", "command ls", "builtin echo", "exec ls", "nohup ls",
     "time ls", "stdbuf -o0 ls", "setsid ls", "watch ls", "flock f ls", "strace ls", "FOO=1 ls",
     # output options write files
     "uniq a b", "uniq -c a b", "sort -o out", "sort --output=out in", "sort -oout in",
     "git diff --output=x", "git diff --output x", "git log --output=x", "tree -o out",
     "tree --output out", "find . -fprint out", "find . -fprint0 out", "find . -fls out",
     "find . -fprintf out %p", "find . -okdir rm {} ;", "date -s 12:00", "date --set=12:00",
     "date 010112002030", "rg --pre ./x TODO", "file -C -m magic", "git -c x=y status",
     "git -C /tmp status", "less f", "more f", "cat a\\ b"],
)  # fmt: skip
def test_side_effects(command):
    assert not is_read_only_command(command)
    assert not TOOL_SPECS["Bash"].is_concurrency_safe({"command": command})
