"""Long Bash commands (issue 28): classifying one and checking it against the permission rules
takes time linear in its length (each check below took from 1 s to minutes before), and a
command too long to analyse is a side effect that no allow rule it cannot be checked against
allows."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from durable_agent.engine.bash_safety import MAX_CHECKED_CHARS, is_read_only_command
from durable_agent.engine.permissions import (
    Behavior,
    Decision,
    PermissionContext,
    PermissionMode,
    PermissionRules,
    _bash_pattern,
    check,
    headless,
    parse_rule,
)

MB = 1024 * 1024
ALLOW, ASK, DENY = Behavior.ALLOW, Behavior.ASK, Behavior.DENY
# Generous for a loaded machine: the slowest shape takes well under 1 s alone.
BOUND = 2.0


Texts = tuple[str, ...] | list[str]


def ctx(allow: Texts = (), ask: Texts = (), deny: Texts = (), **kw: Any) -> PermissionContext:
    def rules(texts: Texts) -> list[Any]:
        return [parse_rule(t, "projectSettings", "/w") for t in texts]

    return PermissionContext(
        cwd="/w",
        home="/home/u",
        rules=PermissionRules(allow=rules(allow), ask=rules(ask), deny=rules(deny)),
        **kw,
    )


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """`fn`'s result and the CPU time it took (the machine's other load does not count);
    over BOUND, the better of two tries. A check that is not linear fails both."""
    start = time.process_time()
    result = fn()
    seconds = time.process_time() - start
    if seconds >= BOUND:
        start = time.process_time()
        fn()
        seconds = min(seconds, time.process_time() - start)
    return result, seconds


def bash(command: str, c: PermissionContext) -> Decision:
    decision, seconds = timed(lambda: check("Bash", {"command": command}, c))
    assert seconds < BOUND, f"checking {len(command):,} characters took {seconds:.2f}s"
    return decision


MEGABYTE_COMMANDS = {
    "quoted": 'echo "' + "a" * MB + '"',  # one long word: shlex built it a character at a time
    "single": "printf '%s' '" + "x" * MB + "'",
    "words": "echo " + "ab " * (MB // 3),
    "heredoc": "cat > f <<'EOF'\n" + "a line of text\n" * (MB // 15) + "EOF",
    "pipes": "cat x" + " | grep a" * (MB // 9),
    "wrapped": "xargs " + "ab " * (MB // 3),
}


@pytest.mark.parametrize("command", MEGABYTE_COMMANDS.values(), ids=MEGABYTE_COMMANDS.keys())
def test_a_megabyte_command_is_a_side_effect_decided_at_once(command: str) -> None:
    read_only, seconds = timed(lambda: is_read_only_command(command))
    assert read_only is False and seconds < BOUND
    guarded = ctx(allow=["Bash(echo:*)", "Bash(cat *)"], deny=["Bash(rm:*)"])
    assert bash(command, guarded).behavior == ASK


def test_read_only_up_to_the_limit() -> None:
    command = 'echo "' + "a" * (MAX_CHECKED_CHARS - 7) + '"'
    assert len(command) == MAX_CHECKED_CHARS
    assert is_read_only_command(command)
    assert not is_read_only_command(command + " ")


def test_too_long_is_never_allowed_by_a_rule_it_cannot_be_checked_against() -> None:
    long = "echo " + "a " * MAX_CHECKED_CHARS
    # A scoped allow rule would need the command parsed: no.
    assert bash(long, ctx(allow=["Bash(echo:*)"])).behavior == ASK
    # Deny and ask rules cannot be ruled out: ask, whatever allows it, bypass mode included,
    # and headless (or dontAsk) that is a deny.
    for guard in (
        {"deny": ["Bash(rm:*)"]},
        {"ask": ["Bash(git push:*)"]},
        {"deny": ["Edit(./keep/**)"]},  # a redirection might write there
        {"deny": ["Read(./secrets/**)"]},  # or read there
    ):
        decision = bash(long, ctx(allow=["Bash"], **guard))
        assert decision.behavior == ASK
        assert "too long to check" in decision.reason and len(decision.reason) < 200
        assert headless(decision).behavior == DENY
        assert bash(long, ctx(**guard, mode=PermissionMode.BYPASS)).behavior == ASK
        assert bash(long, ctx(**guard, mode=PermissionMode.DONT_ASK)).behavior == DENY
    # A whole-tool deny or ask rule holds, and the reason does not quote a megabyte.
    denied = bash(long, ctx(allow=["Bash"], deny=["Bash"]))
    assert denied.behavior == DENY and len(denied.reason) < 200
    assert bash(long, ctx(allow=["Bash"], ask=["Bash"])).behavior == ASK
    # Nothing to check it against: what allows every command allows it.
    assert bash(long, ctx(allow=["Bash"])).behavior == ALLOW
    assert bash(long, ctx(mode=PermissionMode.BYPASS)).behavior == ALLOW
    assert bash(long, ctx(sandboxed=True)).behavior == ALLOW
    asked = bash(long, ctx())
    assert asked.behavior == ASK and len(asked.reason) < 200
    assert bash(long, ctx(mode=PermissionMode.PLAN)).behavior == DENY


def _fill(unit: str, head: str = "", tail: str = "") -> str:
    return head + unit * ((MAX_CHECKED_CHARS - len(head) - len(tail)) // len(unit)) + tail


# Shapes at the limit that made a part of the check quadratic, cubic or exponential.
WORST = {
    "regex backtracking": _fill("a ", "git "),  # `* * * * --x` was a 4-deep backtrack
    "wrappers": _fill("a ", "env "),  # every later word starts a view
    "sudo": _fill("sudo "),
    "shells": _fill("bash -c x ", "env "),
    "eval": _fill("eval ", "env "),
    "find -exec": _fill("-exec find ", "find "),
    "nice options": _fill("- ", "nice "),  # list.pop(0) per option
    "keywords": _fill("if "),
    "descriptors": _fill("echo 2>&1 "),  # copied the rest of the command at each `>&`
    "backticks": _fill("`ls` "),
    "arithmetic": "echo " + "$(( " * 6 + "echo " + "a " * 30_000 + " ))" * 6,
    "expansions": "echo " + "${a:-" * 3000 + "x" + "}" * 3000,  # was a RecursionError
}


@pytest.mark.parametrize("command", WORST.values(), ids=WORST.keys())
def test_worst_shapes_at_the_limit_are_bounded(command: str) -> None:
    assert len(command) <= MAX_CHECKED_CHARS
    c = ctx(
        allow=["Bash(git diff:*)", "Bash(echo *)", "Bash(* a *)"],
        ask=["Bash(curl:*)"],
        deny=["Bash(rm -rf *)", "Bash(git * --force *)", "Bash(* * * * --x)", "Bash(*b*)"],
    )
    bash(command, c)
    _, seconds = timed(lambda: is_read_only_command(command))
    assert seconds < BOUND


def test_deny_still_holds_inside_long_commands_under_the_limit() -> None:
    c = ctx(allow=["Bash"], deny=["Bash(rm:*)"])
    assert bash("sudo " * 300 + "rm x", c).behavior == DENY
    assert bash("ls; " * 10_000 + "rm x", c).behavior == DENY
    assert bash("ls; " * 10_000, c).behavior == ALLOW
    # Too much to see through: not allowed, asked.
    assert bash(_fill("sudo ") + "rm x", c).behavior == ASK


def _reference(spec: str) -> re.Pattern[str]:
    """The regex the rule matcher used before (same semantics, backtracking)."""
    spec = re.sub(r"\s+", " ", spec.strip())
    if spec.endswith(":*"):
        prefix = spec[:-2]
        tail = r"(?: .*)?" if re.search(r"\w$", prefix) else ".*"
        return re.compile(re.escape(prefix) + tail, re.DOTALL)
    pieces = spec.split("*")
    if len(pieces) == 2 and pieces[1] == "" and pieces[0].endswith(" "):
        return re.compile(re.escape(pieces[0][:-1]) + r"(?: .*)?", re.DOTALL)
    return re.compile(".*".join(re.escape(p) for p in pieces), re.DOTALL)


def test_the_linear_matcher_agrees_with_the_regex() -> None:
    rng = random.Random(28)
    alphabet = "ab -:*/"
    for _ in range(20_000):
        spec = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 7))).strip()
        if not spec or spec == "*":
            continue
        text = "".join(rng.choice("ab -:/\n") for _ in range(rng.randint(0, 9)))
        expected = _reference(spec).fullmatch(text) is not None
        assert _bash_pattern(spec).fullmatch(text) == expected, (spec, text)
