"""The permission matcher (engine/permissions/): pure, table-driven.

Cases marked "docs" are the examples of Claude Code's public permission docs (permissions,
permission modes, sandboxing); the rest are adversarial: a deny rule must hold however the
command is dressed up, and an allow rule must never cover more than the command it names.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agent.engine.permissions import (
    Behavior,
    Decision,
    PermissionContext,
    PermissionMode,
    PermissionRules,
    ShellParseError,
    check,
    headless,
    parse_rule,
    split_command,
)

CWD = "/w/proj"
HOME = "/home/alice"
ALLOW, ASK, DENY = Behavior.ALLOW, Behavior.ASK, Behavior.DENY


def ctx(
    allow: tuple[str, ...] | list[str] = (),
    ask: tuple[str, ...] | list[str] = (),
    deny: tuple[str, ...] | list[str] = (),
    *,
    source: str = "projectSettings",
    root: str | None = CWD,
    **kw: Any,
) -> PermissionContext:
    def rules(texts: tuple[str, ...] | list[str]) -> list[Any]:
        return [parse_rule(t, source, root) for t in texts]

    return PermissionContext(
        cwd=CWD,
        home=HOME,
        rules=PermissionRules(allow=rules(allow), ask=rules(ask), deny=rules(deny)),
        **kw,
    )


def rctx(rules: dict[str, list[str]], **kw: Any) -> PermissionContext:
    return ctx(rules.get("allow", []), rules.get("ask", []), rules.get("deny", []), **kw)


def bash(command: str, c: PermissionContext) -> Decision:
    return check("Bash", {"command": command}, c)


# --------------------------------------------------------------------------- parse_rule


@pytest.mark.parametrize(
    "text, tool, specifier",
    [
        ("Bash", "Bash", None),
        ("Bash(*)", "Bash", None),  # docs: Bash(*) is equivalent to Bash
        ("Bash(npm run build)", "Bash", "npm run build"),
        ("Bash(npm run test:*)", "Bash", "npm run test:*"),
        ("  Read(./.env)  ", "Read", "./.env"),
        ("Edit(/src/**/*.ts)", "Edit", "/src/**/*.ts"),
        ("Read(//Users/alice/secrets/**)", "Read", "//Users/alice/secrets/**"),
        ("Read(~/Documents/*.pdf)", "Read", "~/Documents/*.pdf"),
        ("WebFetch(domain:example.com)", "WebFetch", "domain:example.com"),
        ("mcp__puppeteer", "mcp__puppeteer", None),
        ("mcp__puppeteer__puppeteer_navigate", "mcp__puppeteer__puppeteer_navigate", None),
        ("mcp__puppeteer__*", "mcp__puppeteer__*", None),
        ("Task(Explore)", "Task", "Explore"),
        ("WebSearch", "WebSearch", None),
        ("Bash(echo (a))", "Bash", "echo (a)"),
    ],
)
def test_parse_rule(text: str, tool: str, specifier: str | None) -> None:
    rule = parse_rule(text, "userSettings", "/r")
    assert (rule.tool, rule.specifier, rule.source, rule.root) == (
        tool,
        specifier,
        "userSettings",
        "/r",
    )
    assert rule.text == text.strip()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "Bash(",
        "Bash(ls",
        "Bash)",
        "Bash()",  # no documented meaning: an error, not a silent no-op deny
        "Bash(ls) x",
        "(ls)",
        "1Bash",
        "Ba sh",
        "Bash*",
        "mcp__server(x)",
        "WebFetch(example.com)",
        "Bash(:*)",
    ],
)
def test_parse_rule_rejects_bad_syntax_in_one_line(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_rule(text)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- Bash: docs


@pytest.mark.parametrize(
    "allow, command, expected",
    [
        # docs: a bare tool name matches every use
        (["Bash"], "npm run build && rm -rf x", ALLOW),
        (["Bash(*)"], "anything at all | sh", ALLOW),
        # docs: exact command
        (["Bash(npm run build)"], "npm run build", ALLOW),
        (["Bash(npm run build)"], "npm run build --prod", ASK),
        (["Bash(npm run build)"], "npm  run   build", ALLOW),  # whitespace is not meaning
        # docs: legacy prefix `:*`, word boundary
        (["Bash(npm run test:*)"], "npm run test", ALLOW),
        (["Bash(npm run test:*)"], "npm run test --watch", ALLOW),
        (["Bash(npm run test:*)"], "npm run testing", ASK),
        (["Bash(npm:*)"], "npmx install", ASK),
        (["Bash(curl http://site.com/:*)"], "curl http://site.com/page", ALLOW),
        # docs: the curl prefix is easy to get around: these are not matched
        (["Bash(curl http://github.com/:*)"], "curl -X GET http://github.com/x", ASK),
        (["Bash(curl http://github.com/:*)"], "curl https://github.com/x", ASK),
        (["Bash(curl http://github.com/:*)"], "URL=http://github.com && curl $URL", ASK),
        # docs: `*` wildcards anywhere
        (["Bash(npm run *)"], "npm run lint", ALLOW),
        (["Bash(git * main)"], "git checkout main", ALLOW),
        (["Bash(git * main)"], "git merge main", ALLOW),
        (["Bash(git * main)"], "git checkout dev", ASK),
        (["Bash(* --version)"], "node --version", ALLOW),
        (["Bash(* --version)"], "node --help", ASK),
        (["Bash(* install)"], "npm install", ALLOW),
        # docs: a space before `*` is a word boundary
        (["Bash(ls *)"], "ls -la", ALLOW),
        (["Bash(ls *)"], "lsof", ASK),
        (["Bash(ls *)"], "ls", ALLOW),  # a single trailing ` *` may match nothing
        (["Bash(ls*)"], "lsof", ALLOW),
        (["Bash(ls*)"], "ls -la", ALLOW),
        # docs: prefix rules know shell operators
        (["Bash(safe-cmd:*)"], "safe-cmd && other-cmd", ASK),
        (["Bash(git diff:*)"], "git diff && rm -rf x", ASK),
        (["Bash(git diff:*)", "Bash(git status)"], "git status && git diff HEAD", ALLOW),
        # docs: process wrappers are stripped before matching
        (["Bash(npm test *)"], "timeout 30 npm test", ALLOW),
        (["Bash(npm test *)"], "timeout -s KILL 30 npm test", ALLOW),
        (["Bash(npm test *)"], "nice -n 5 npm test --ci", ALLOW),
        (["Bash(npm test *)"], "nohup npm test", ALLOW),
        (["Bash(npm test *)"], "time npm test", ALLOW),
        (["Bash(npm test *)"], "stdbuf -o L npm test", ALLOW),
        # safer reading: no other wrapper or assignment is seen through by an allow rule
        (["Bash(npm test *)"], "env npm test", ASK),
        (["Bash(npm test *)"], "sudo npm test", ASK),
        (["Bash(npm test *)"], "FOO=1 npm test", ASK),
        (["Bash(npm test *)"], "xargs npm test", ASK),
        (["Bash(npm test *)"], "timeout npm test", ASK),  # no duration: not the wrapper form
        (["Bash(rm *)"], "/bin/rm x", ASK),  # an allow rule names the program as written
    ],
)
def test_bash_allow_rules_docs(allow: list[str], command: str, expected: Behavior) -> None:
    assert bash(command, ctx(allow=allow)).behavior == expected


@pytest.mark.parametrize(
    "allow, ask, deny, command, expected",
    [
        # docs: deny -> ask -> allow, and specificity does not change the order
        (["Bash(aws s3 ls)"], [], ["Bash(aws *)"], "aws s3 ls", DENY),
        (["Bash(git push origin main)"], ["Bash(git push *)"], [], "git push origin main", ASK),
        (["Bash"], ["Bash(git push:*)"], [], "git push", ASK),
        (["Bash"], ["Bash(git push:*)"], [], "git status", ALLOW),
        (["Bash"], [], ["Bash"], "ls", DENY),
        ([], ["Bash"], ["Bash(rm *)"], "rm x", DENY),
        ([], ["Bash"], ["Bash(rm *)"], "ls", ASK),
        (["Bash(npm:*)", "Bash(git:*)"], [], ["Bash"], "npm test", DENY),
        ([], [], [], "ls", ASK),  # docs: Bash needs approval by default
    ],
)
def test_precedence(
    allow: list[str], ask: list[str], deny: list[str], command: str, expected: Behavior
) -> None:
    assert bash(command, ctx(allow=allow, ask=ask, deny=deny)).behavior == expected


# --------------------------------------------------------------------------- Bash: adversarial

HIDDEN_RM = [
    "rm x",
    "rm -rf /",
    "git status && rm -rf x",
    "git status || rm x",
    "git status; rm x",
    "git status;rm x",
    "git status & rm x",
    "git status\nrm x",
    "git status | rm x",
    "git status |& rm x",
    "cat f | xargs rm",
    "(rm x)",
    "(cd /tmp && rm x)",
    "{ rm x; }",
    "echo $(rm x)",
    'echo "$(rm x)"',
    "echo `rm x`",
    'echo "`rm x`"',
    "echo $(echo $(rm x))",
    "diff <(rm x) y",
    "env rm x",
    "env -i PATH=/bin rm x",
    "FOO=1 rm x",
    "A=1 B=2 rm x",
    "timeout 5 rm x",
    "nice -n 10 rm x",
    "nohup rm x &",
    "command rm x",
    "builtin rm x",
    "exec rm x",
    "sudo rm x",
    "sudo -u root rm x",
    "/bin/rm x",
    "/usr/bin/rm -f x",
    "./rm x",
    "\\rm x",
    "'rm' x",
    '"rm" x',
    "r''m x",
    "sh -c 'rm x'",
    'bash -c "ls; rm x"',
    "bash -lc 'rm x'",
    "eval rm x",
    "eval 'rm x'",
    "find . -name '*.o' -exec rm {} \\;",
    "if true; then rm x; fi",
    "while true; do rm x; done",
    "! rm x",
    "rm x > /dev/null 2>&1",
    "echo ok # comment\nrm x",
    "timeout 5 sudo env FOO=1 rm x",
    "echo $(( $(rm x) + 1 ))",  # a substitution inside arithmetic runs
    "echo ${X:-$(rm x)}",  # and inside a default value
    "echo $((rm x) )",  # bash may read this as a subshell in a substitution
    # What the grammar reads beyond the old lexer: the commands inside are parts.
    "f() { rm x; }",  # a function's body (checked where it is defined)
    "function g { rm x; }",
    "for f in a b; do rm $f; done",
    "for ((i = 0; i < 3; i++)); do rm x; done",
    "case $1 in a) echo a;; *) rm x;; esac",
    "case $1 in a|b) rm x ;; esac",
    "until false; do rm x; done",
    "[[ -f x ]] && rm x",
    "export A=$(rm x)",
    "A=$(rm x)",
    "r\\\nm x",  # a line continuation inside the word
    "sudo > /dev/null rm x",  # the grammar puts `rm x` in the redirection
    # Here-documents: an unquoted body's substitutions run, a shell runs its body.
    "cat <<EOF\n$(rm -rf /)\nEOF",
    "cat <<EOF\n`rm x`\nEOF",
    "cat <<EOF > out\n${X:-$(rm x)}\nEOF",
    "cat <<-EOF\n\t$(rm x)\n\tEOF",
    "cat <<-EOF\n\tbody\n\tEOF\nrm x",  # the body ends at the tab-indented delimiter
    "bash <<EOF\nrm x\nEOF",
    "bash <<'EOF'\nrm x\nEOF",
    "sh -s <<'EOF'\necho hi\nrm -rf x\nEOF",
    "cat <<'EOF' | bash\nrm x\nEOF",
    "bash -c \"$(cat <<'EOF'\nrm x\nEOF\n)\"",
    "ssh host <<'EOF'\nrm x\nEOF",
    "bash <<< 'rm x'",
    'sh <<< "echo; rm x"',
]


@pytest.mark.parametrize("command", HIDDEN_RM)
def test_deny_rule_holds_however_the_command_is_written(command: str) -> None:
    # Even with the whole Bash tool allowed, the deny rule must find the rm.
    d = bash(command, ctx(allow=["Bash"], deny=["Bash(rm:*)"]))
    assert d.behavior == DENY, d.reason
    assert d.rule == "Bash(rm:*)"


@pytest.mark.parametrize("command", HIDDEN_RM)
def test_ask_rule_sees_what_a_deny_rule_sees(command: str) -> None:
    d = bash(command, ctx(allow=["Bash"], ask=["Bash(rm *)"]))
    assert d.behavior == ASK, d.reason


@pytest.mark.parametrize(
    "command",
    [
        "echo 'rm x'",  # quoted: an argument, not a command
        'echo "a; rm x"',
        "echo 'a && rm x'",
        "echo rm x",
        "git commit -m 'rm -rf everything'",
        "grep -r 'rm x' .",
        "echo ok # rm x",
        "printf '%s\\n' '$(rm x)'",  # single quotes: no substitution
        "rmdir d",
        "form x",
        # A here-document is data: its body is not commands (unless a shell reads it).
        "cat <<'EOF' > notes.txt\nhello; rm x\nEOF",
        "cat <<EOF > notes.txt\nhello; rm x\nEOF",
        "cat <<\\EOF\n$(rm x) `rm x`\nEOF",
        'cat <<"EOF"\n$(rm x)\nEOF',
        "cat <<-'EOF'\n\trm x\n\tEOF",
        "git commit -F - <<'EOF'\nfix: do not rm x\n\nrm x; rm -rf /\nEOF",
        "git commit -m \"$(cat <<'EOF'\nrm x\nEOF\n)\"",
        "grep rm <<< 'rm x'",
    ],
)
def test_deny_rule_does_not_fire_on_arguments(command: str) -> None:
    assert bash(command, ctx(allow=["Bash"], deny=["Bash(rm:*)"])).behavior == ALLOW


@pytest.mark.parametrize(
    "command, expected",
    [
        ("git diff", ALLOW),
        ("git diff HEAD~1 -- src", ALLOW),
        ("git diff && rm -rf x", ASK),
        ("git diff; rm x", ASK),
        ("git diff;rm x", ASK),
        ("git diff || rm x", ASK),
        ("git diff | sh", ASK),
        ("git diff & rm x", ASK),
        ("git diff\nrm x", ASK),
        ("git diff $(rm x)", ASK),
        ("git diff `rm x`", ASK),
        ("(git diff) && rm x", ASK),
        ("git diff <(rm x)", ASK),
        ("echo $(git diff)", ALLOW),  # every part is allowed
        ("echo 'a; rm x'", ALLOW),  # `;` inside quotes is an argument
        ('echo "a && rm x"', ALLOW),
        ("echo a;rm x", ASK),
        ("echo 'unbalanced", ASK),
        ('echo "unbalanced', ASK),
        ("echo $(unbalanced", ASK),
        ("echo `unbalanced", ASK),
        ("git diff 2>&1", ALLOW),
        ("git diff > /dev/null", ALLOW),
        ("git diff 2>/dev/null | echo", ALLOW),
        ("git diff > out.patch", ASK),  # a redirection writes a file: an edit, not covered
        ("git diff >> ~/.ssh/authorized_keys", ASK),
        ("echo x > $F", ASK),
        ("$CMD diff", ASK),  # the program is computed: a scoped rule cannot allow it
        ("git diff\\\n HEAD", ALLOW),
        ("echo $((1 + 2))", ALLOW),  # arithmetic runs nothing
        ("echo $(( $(git diff) * 2 ))", ALLOW),
        ("echo $(( $(rm x) + 1 ))", ASK),  # a line continuation is not a newline
        ("", ASK),
    ],
)
def test_allow_rule_covers_only_what_it_names(command: str, expected: Behavior) -> None:
    d = bash(command, ctx(allow=["Bash(git diff:*)", "Bash(echo:*)"]))
    assert d.behavior == expected, d.reason


@pytest.mark.parametrize(
    "command, allow, expected",
    [
        ("git diff > out.patch", ["Bash(git diff:*)", "Edit(./out.patch)"], ALLOW),
        ("git diff > /tmp/p", ["Bash(git diff:*)", "Edit(//tmp/**)"], ALLOW),
        ("git diff > secret.txt", ["Bash(git diff:*)", "Edit"], DENY),
        # The whole Bash tool allowed (`--allowedTools Bash`): its redirections too, but a
        # deny rule on the target still holds.
        ("echo started >> marker", ["Bash"], ALLOW),
        ("echo x > $F", ["Bash"], ASK),  # computed: the Edit deny rule might match it
        ("echo x > secret.txt", ["Bash"], DENY),
    ],
)
def test_redirections_are_edits(command: str, allow: list[str], expected: Behavior) -> None:
    d = bash(command, ctx(allow=allow, deny=["Edit(./secret.txt)"]))
    assert d.behavior == expected, d.reason


def test_input_redirection_is_a_read() -> None:
    d = bash("cat < secrets/key.txt", ctx(allow=["Bash"], deny=["Read(./secrets/**)"]))
    assert (d.behavior, d.rule) == (DENY, "Read(./secrets/**)")


def test_computed_program_asks_when_a_scoped_deny_exists() -> None:
    c = ctx(allow=["Bash"], deny=["Bash(rm:*)"])
    assert bash("$X -rf /", c).behavior == ASK
    assert bash("timeout 5 $(echo rm) x", c).behavior == ASK
    assert bash("$X -rf /", ctx(allow=["Bash"])).behavior == ALLOW


def test_unparseable_with_whole_tool_rules() -> None:
    assert bash("echo 'x", ctx(allow=["Bash"])).behavior == ALLOW
    assert bash("echo 'x", ctx(allow=["Bash"], deny=["Bash(rm:*)"])).behavior == ASK
    assert bash("echo 'x", ctx(deny=["Bash"])).behavior == DENY


@pytest.mark.parametrize(
    "command",
    [
        "echo $(",  # tree-sitter recovers from these (an ERROR or a MISSING node): unparseable
        "if then",
        "echo 'x",
        'echo "x',
        "echo `x",
        "cat <<EOF\nno end",
        "cat <<EOF\nx\n EOF",  # ` EOF` does not end the body
        "cat <<EOF\nx\nEOF \nrm x",  # nor does `EOF ` (trailing blank)
        "echo `a` `b`",  # the grammar reads two backtick substitutions as one
        "echo 'a'\\ b",  # the grammar drops the escaped blank
        "case x in",
        "for x in; do",
        "f() {",
    ],
)
def test_what_the_grammar_cannot_read_is_unparseable(command: str) -> None:
    with pytest.raises(ShellParseError):
        split_command(command)
    assert bash(command, ctx(allow=["Bash"], deny=["Bash(rm:*)"])).behavior == ASK
    assert bash(command, ctx(allow=["Bash(echo:*)", "Bash(cat:*)"])).behavior == ASK


@pytest.mark.parametrize(
    "command, allow, expected",
    [
        # A heredoc's body is data: a rule for the program is enough.
        ("cat <<'EOF' > notes.txt\nhello; rm x\nEOF", ["Bash(cat:*)", "Edit"], ALLOW),
        ("git commit -F - <<'EOF'\nmsg; curl x\nEOF", ["Bash(git commit:*)"], ALLOW),
        ("cat <<EOF\n$HOME $(whoami)\nEOF", ["Bash(cat:*)"], ASK),  # whoami runs
        ("cat <<EOF\n$HOME $(whoami)\nEOF", ["Bash(cat:*)", "Bash(whoami)"], ALLOW),
        ("grep x <<< 'a; b'", ["Bash(grep:*)"], ALLOW),
        # Fed to a shell, it is a script: each of its commands needs a rule.
        ("bash <<'EOF'\necho hi\nEOF", ["Bash(bash:*)"], ASK),
        ("bash <<'EOF'\necho hi\nEOF", ["Bash(bash:*)", "Bash(echo:*)"], ALLOW),
        ("bash <<< 'curl x'", ["Bash(bash:*)"], ASK),
        ('bash <<< "$SCRIPT"', ["Bash(bash:*)"], ASK),
        # Fed to another interpreter, it cannot be checked: only a whole-tool rule allows it.
        ("python3 - <<'EOF'\nprint(1)\nEOF", ["Bash(python3:*)"], ASK),
        ("python3 - <<'EOF'\nprint(1)\nEOF", ["Bash"], ALLOW),
        ("node <<< 'console.log(1)'", ["Bash(node:*)"], ASK),
    ],
)
def test_here_documents(command: str, allow: list[str], expected: Behavior) -> None:
    assert bash(command, ctx(allow=allow)).behavior == expected


def test_a_here_document_to_an_interpreter_asks_when_a_scoped_deny_exists() -> None:
    # What python runs cannot be matched against `Bash(rm:*)`.
    c = ctx(allow=["Bash"], deny=["Bash(rm:*)"])
    assert bash("python3 - <<'EOF'\nimport shutil\nEOF", c).behavior == ASK
    assert bash("cat <<'EOF' > x.py\nimport shutil\nEOF", c).behavior == ALLOW


@pytest.mark.parametrize(
    "command, texts",
    [
        ("a && b || c; d | e & f\ng", ["a", "b", "c", "d", "e", "f", "g"]),
        ("echo 'x;y' \"a|b\"", ["echo 'x;y' \"a|b\""]),
        ("x $(y $(z))", ["z", "y $(z)", "x $(y $(z))"]),
        ("FOO=1 cmd > out 2>&1 < in", ["FOO=1 cmd"]),
        ("if a; then b; else c; fi", ["a", "b", "c"]),
        ("cat <<'EOF' > out\na; b\nEOF\nc", ["cat", "c"]),
        ("cat <<EOF\n$(a) `b`\nEOF", ["a", "b", "cat"]),
        ("cat <<-EOF\n\t$(a)\n\tEOF\nb", ["a", "cat", "b"]),
        ('grep x <<< "$(a)"', ["a", "grep x"]),
        ("bash <<'EOF'\na; b\nEOF", ["bash", "a", "b"]),
        ("f() { a; }; for i in $(b); do c; done", ["a", "b", "c"]),
        ("case $x in y) a;; *) b;; esac", ["a", "b"]),
        ("[[ -n $(a) ]]", ["a", "[[ -n $(a) ]]"]),
        ("A=1 B=$(a); export C=2", ["a", "A=1 B=$(a)", "export C=2"]),
    ],
)
def test_split_command(command: str, texts: list[str]) -> None:
    assert [p.text() for p in split_command(command)] == texts


# --------------------------------------------------------------------------- paths


def read(path: str | None, c: PermissionContext, tool: str = "Read") -> Decision:
    key = "file_path" if tool == "Read" else "path"
    inp: dict[str, Any] = {"pattern": "x"}
    if path is not None:
        inp[key] = path
    return check(tool, inp, c)


SECRETS = ctx(deny=["Read(./secrets/**)"])


@pytest.mark.parametrize(
    "path, expected",
    [
        ("secrets/key.txt", DENY),
        ("./secrets/key.txt", DENY),
        ("./secrets/a/b", DENY),
        ("secrets/../secrets/key.txt", DENY),
        ("src/../secrets/key.txt", DENY),
        ("/w/proj/secrets/key.txt", DENY),
        ("/w/proj/src/../secrets/key.txt", DENY),
        ("/w/proj//secrets///key.txt", DENY),
        ("secrets", DENY),
        ("secretsX/key.txt", ALLOW),
        ("src/secrets/key.txt", ALLOW),  # anchored at cwd: ./secrets only
        ("src/main.py", ALLOW),
        ("secrets/../src/main.py", ALLOW),
    ],
)
def test_read_deny_directory_rule(path: str, expected: Behavior) -> None:
    assert read(path, SECRETS).behavior == expected


@pytest.mark.parametrize("tool", ["Read", "Grep", "Glob"])
def test_read_rules_cover_read_grep_glob(tool: str) -> None:
    d = read("secrets/key.txt" if tool == "Read" else "secrets", SECRETS, tool)
    assert (d.behavior, d.rule) == (DENY, "Read(./secrets/**)")


@pytest.mark.parametrize("tool", ["Grep", "Glob"])
def test_search_root_containing_a_denied_path_is_not_denied(tool: str) -> None:
    # The matcher judges the search root; the tools exclude denied paths from their results.
    assert read(None, SECRETS, tool).behavior == ALLOW  # no path: cwd
    assert read(".", SECRETS, tool).behavior == ALLOW


def test_glob_pattern_that_climbs_out_is_checked() -> None:
    c = ctx(deny=["Read(//etc/**)"])
    assert check("Glob", {"pattern": "../../etc/*"}, c).behavior == DENY
    assert check("Glob", {"pattern": "/etc/**"}, c).behavior == DENY
    assert check("Glob", {"pattern": "../*"}, ctx()).behavior == ASK  # outside the workspace
    assert check("Glob", {"pattern": "src/**/*.py"}, c).behavior == ALLOW


@pytest.mark.parametrize(
    "rule, tool, path, expected",
    [
        # docs: //path is absolute
        ("Read(//Users/alice/secrets/**)", "Read", "/Users/alice/secrets/a", DENY),
        ("Read(//Users/alice/secrets/**)", "Read", "/w/proj/Users/alice/secrets/a", ALLOW),
        # docs: ~/path is from home
        ("Read(~/Documents/*.pdf)", "Read", "~/Documents/a.pdf", DENY),
        ("Read(~/Documents/*.pdf)", "Read", "/home/alice/Documents/a.pdf", DENY),
        ("Read(~/Documents/*.pdf)", "Read", "/home/alice/Documents/sub/a.pdf", ASK),
        ("Read(~/.ssh/**)", "Read", "~/.ssh/id_ed25519", DENY),
        ("Read(~/.ssh/**)", "Read", "~/x/../.ssh/id_ed25519", DENY),
        # docs: /path is relative to the settings file's root (here /w/proj)
        ("Edit(/src/**/*.ts)", "Edit", "src/a.ts", DENY),
        ("Edit(/src/**/*.ts)", "Edit", "src/deep/er/a.ts", DENY),
        ("Edit(/src/**/*.ts)", "Write", "/w/proj/src/a.ts", DENY),
        ("Edit(/src/**/*.ts)", "Edit", "/src/a.ts", ASK),
        ("Edit(/src/**/*.ts)", "Edit", "src/a.js", ASK),
        # docs: path and ./path are relative to cwd
        ("Read(./.env)", "Read", ".env", DENY),
        ("Read(./.env)", "Read", "/w/proj/.env", DENY),
        ("Read(.env)", "Read", "sub/.env", DENY),  # gitignore: no slash -> any depth
        ("Read(*.env)", "Read", "prod.env", DENY),
        ("Read(*.env)", "Read", "config/prod.env", DENY),
        ("Read(*.env)", "Read", "prod.env.bak", ALLOW),
        ("Read(./.env)", "Read", "sub/.env", ALLOW),
        ("Read(src/*.py)", "Read", "src/a.py", DENY),
        ("Read(src/*.py)", "Read", "src/x/a.py", ALLOW),
        ("Read(src/**)", "Read", "src/x/y/z", DENY),
        ("Read", "Grep", ".", DENY),  # a bare Read rule covers Grep too
        # docs: Edit rules cover every tool that edits files
        ("Edit(./docs/**)", "Write", "docs/a.md", DENY),
        ("Edit(./docs/**)", "NotebookEdit", "docs/a.ipynb", DENY),
        ("Edit", "Write", "anything.txt", DENY),
    ],
)
def test_path_forms(rule: str, tool: str, path: str, expected: Behavior) -> None:
    key = {"Grep": "path", "NotebookEdit": "notebook_path"}.get(tool, "file_path")
    d = check(tool, {key: path, "pattern": "x"}, ctx(deny=[rule]))
    assert d.behavior == expected, d.reason


@pytest.mark.parametrize(
    "rule, path, expected",
    [
        # gitignore (pathspec): classes, ** in the middle, a folder's contents and the folder
        ("Read(./conf/[ab].json)", "conf/a.json", DENY),
        ("Read(./conf/[ab].json)", "conf/c.json", ALLOW),
        ("Read(./conf/[!a].json)", "conf/b.json", DENY),
        ("Read(./a/**/secret)", "a/secret", DENY),
        ("Read(./a/**/secret)", "a/x/y/secret", DENY),
        ("Read(./a/**/secret)", "b/x/secret", ALLOW),
        ("Read(**/id_rsa)", "deep/er/id_rsa", DENY),
        ("Read(./secrets/**)", "secrets", DENY),  # `dir/**` covers the folder too
        ("Read(./secrets/)", "secrets/a", DENY),
        ("Read(./sec?ets)", "secrets", DENY),
        ("Read(./sec?ets)", "sec/ets", ALLOW),  # `?` stays within a name
        # what gitignore reads as a comment or an exception names that file in a rule
        ("Read(#notes)", "#notes", DENY),
        ("Read(!important)", "!important", DENY),
        ("Read(!important)", "important", ALLOW),
        # a climb out of the anchor folder names a folder higher up
        ("Read(./../shared/*.key)", "/w/shared/a.key", DENY),
        ("Read(~/../bob/**)", "/home/bob/x", DENY),
    ],
)
def test_gitignore_patterns(rule: str, path: str, expected: Behavior) -> None:
    d = check("Read", {"file_path": path}, ctx(deny=[rule], additional_directories=["/"]))
    assert d.behavior == expected, d.reason


def test_the_workspace_path_is_never_read_as_a_pattern() -> None:
    """A workspace named like a pattern (`proj[1]`, `a*b`): the rule's anchor is that very
    folder, not a class or a wildcard that would miss it or match its neighbours."""
    for cwd, neighbour in (("/w/proj[1]", "/w/proj1"), ("/w/a*b", "/w/axb"), ("/w/#x", "/w/x")):
        rules = PermissionRules(deny=[parse_rule("Read(./.env)", "projectSettings", cwd)])
        c = PermissionContext(cwd=cwd, home=HOME, rules=rules, additional_directories=["/w"])
        assert read(f"{cwd}/.env", c).behavior == DENY
        assert read(f"{neighbour}/.env", c).behavior == ALLOW
        star = PermissionContext(
            cwd=cwd, home=HOME, additional_directories=["/w"],
            rules=PermissionRules(deny=[parse_rule("Read(*.env)", "projectSettings", cwd)]),
        )  # fmt: skip
        assert read(f"{cwd}/deep/prod.env", star).behavior == DENY
        assert read(f"{neighbour}/prod.env", star).behavior == ALLOW


def test_slash_rule_without_root_falls_back_to_cwd() -> None:
    c = ctx(deny=["Read(/conf/*)"], root=None)
    assert read("conf/a", c).behavior == DENY


def test_slash_rule_is_relative_to_its_own_settings_root() -> None:
    c = PermissionContext(
        cwd=CWD,
        home=HOME,
        rules=PermissionRules(
            deny=[parse_rule("Read(/conf/*)", "/other/.claude/settings.json", "/other")]
        ),
        additional_directories=["/other"],
    )
    assert read("/other/conf/a", c).behavior == DENY
    assert read("conf/a", c).behavior == ALLOW


@pytest.mark.parametrize(
    "tool, path, extra, expected",
    [
        ("Read", "/etc/passwd", [], ASK),  # outside the working directories
        ("Read", "../sibling/x", [], ASK),
        ("Read", "/w/projX/x", [], ASK),  # a prefix of the name is not inside
        ("Read", "/data/x", ["/data"], ALLOW),  # --add-dir widens the boundary
        ("Read", "~/notes/x", ["~/notes"], ALLOW),
        ("Grep", "/data", ["/data"], ALLOW),
        ("Grep", "/", [], ASK),
        ("Read", "src/x", [], ALLOW),
    ],
)
def test_workspace_boundary(tool: str, path: str, extra: list[str], expected: Behavior) -> None:
    assert read(path, ctx(additional_directories=extra), tool).behavior == expected


def test_allow_rule_reaches_outside_the_workspace() -> None:
    assert read("/etc/hosts", ctx(allow=["Read(//etc/hosts)"])).behavior == ALLOW


# --------------------------------------------------------------------------- other tools


@pytest.mark.parametrize(
    "rules, tool, tool_input, expected",
    [
        (
            {"allow": ["WebFetch(domain:example.com)"]},
            "WebFetch",
            {"url": "https://example.com/a"},
            ALLOW,
        ),
        (
            {"allow": ["WebFetch(domain:example.com)"]},
            "WebFetch",
            {"url": "https://evil.com/a"},
            ASK,
        ),
        (
            {"allow": ["WebFetch(domain:example.com)"]},
            "WebFetch",
            {"url": "https://example.com.evil.com/"},
            ASK,
        ),
        (
            {"allow": ["WebFetch(domain:example.com)"]},
            "WebFetch",
            {"url": "https://a.example.com/"},
            ASK,
        ),
        (
            {"allow": ["WebFetch(domain:*.example.com)"]},
            "WebFetch",
            {"url": "https://a.example.com/"},
            ALLOW,
        ),
        (
            {"deny": ["WebFetch(domain:example.com)"], "allow": ["WebFetch"]},
            "WebFetch",
            {"url": "https://a.example.com/"},
            DENY,
        ),
        (
            {"deny": ["WebFetch(domain:example.com)"], "allow": ["WebFetch"]},
            "WebFetch",
            {"url": "https://EXAMPLE.com./"},
            DENY,
        ),
        ({}, "WebFetch", {"url": "https://example.com/"}, ASK),
        ({"allow": ["mcp__github"]}, "mcp__github__create_issue", {}, ALLOW),
        ({"allow": ["mcp__github__*"]}, "mcp__github__create_issue", {}, ALLOW),
        ({"allow": ["mcp__github__get_issue"]}, "mcp__github__create_issue", {}, ASK),
        ({"allow": ["mcp__github"]}, "mcp__githubx__create_issue", {}, ASK),
        (
            {"deny": ["mcp__github"], "allow": ["mcp__github__get_issue"]},
            "mcp__github__get_issue",
            {},
            DENY,
        ),
        ({}, "mcp__github__get_issue", {}, ASK),  # MCP tools need permission
        ({"deny": ["Task(Explore)"]}, "Task", {"subagent_type": "Explore"}, DENY),
        ({"deny": ["Task(Explore)"]}, "Task", {"subagent_type": "Plan"}, ALLOW),
        ({"deny": ["Agent(Explore)"]}, "Task", {"subagent_type": "Explore"}, DENY),
        ({"allow": ["WebSearch"]}, "WebSearch", {"query": "x"}, ALLOW),
        ({}, "WebSearch", {"query": "x"}, ASK),
        ({}, "SomeNewTool", {}, ASK),  # unknown tools need permission
        (
            {"deny": ["SomeNewTool(anything)"]},
            "SomeNewTool",
            {},
            DENY,
        ),  # unknown specifier: deny widens
        ({"allow": ["SomeNewTool(anything)"]}, "SomeNewTool", {}, ASK),  # ...and allow never
        ({}, "TodoWrite", {"todos": []}, ALLOW),
    ],
)
def test_other_tools(
    rules: dict[str, list[str]], tool: str, tool_input: dict[str, Any], expected: Behavior
) -> None:
    assert check(tool, tool_input, rctx(rules)).behavior == expected


# --------------------------------------------------------------------------- modes

M = PermissionMode


@pytest.mark.parametrize(
    "mode, tool, tool_input, rules, expected",
    [
        # default: reads allowed, Bash and edits ask
        (M.DEFAULT, "Read", {"file_path": "a.py"}, {}, ALLOW),
        (M.DEFAULT, "Edit", {"file_path": "a.py"}, {}, ASK),
        (M.DEFAULT, "Write", {"file_path": "a.py"}, {}, ASK),
        (M.DEFAULT, "Bash", {"command": "ls"}, {}, ASK),  # read-only Bash still asks
        (M.DEFAULT, "Edit", {"file_path": "a.py"}, {"allow": ["Edit(./a.py)"]}, ALLOW),
        # acceptEdits: edits inside the working directories, and mkdir/touch/mv/cp there
        (M.ACCEPT_EDITS, "Edit", {"file_path": "a.py"}, {}, ALLOW),
        (M.ACCEPT_EDITS, "Write", {"file_path": "/w/proj/new/b.py"}, {}, ALLOW),
        (M.ACCEPT_EDITS, "NotebookEdit", {"notebook_path": "n.ipynb"}, {}, ALLOW),
        (M.ACCEPT_EDITS, "Write", {"file_path": "/etc/x"}, {}, ASK),
        (M.ACCEPT_EDITS, "Write", {"file_path": "../x"}, {}, ASK),
        (M.ACCEPT_EDITS, "Write", {"file_path": ".git/config"}, {}, ASK),  # protected
        (M.ACCEPT_EDITS, "Write", {"file_path": ".claude/settings.json"}, {}, ASK),
        (M.ACCEPT_EDITS, "Write", {"file_path": ".claude/commands/x.md"}, {}, ALLOW),
        (M.ACCEPT_EDITS, "Edit", {"file_path": "a.py"}, {"deny": ["Edit(./a.py)"]}, DENY),
        (M.ACCEPT_EDITS, "Edit", {"file_path": "a.py"}, {"ask": ["Edit"]}, ASK),
        (M.ACCEPT_EDITS, "Bash", {"command": "mkdir -p build/out && touch build/x"}, {}, ALLOW),
        (M.ACCEPT_EDITS, "Bash", {"command": "mv a b && cp b c"}, {}, ALLOW),
        (M.ACCEPT_EDITS, "Bash", {"command": "cp a /etc/x"}, {}, ASK),
        (M.ACCEPT_EDITS, "Bash", {"command": "mkdir .git/hooks"}, {}, ASK),
        (M.ACCEPT_EDITS, "Bash", {"command": "mkdir $D"}, {}, ASK),
        (M.ACCEPT_EDITS, "Bash", {"command": "mkdir x && rm -rf y"}, {}, ASK),
        (M.ACCEPT_EDITS, "Bash", {"command": "rm x"}, {}, ASK),
        (M.ACCEPT_EDITS, "Bash", {"command": "sudo mkdir x"}, {}, ASK),
        (
            M.ACCEPT_EDITS,
            "Bash",
            {"command": "mkdir x && npm test"},
            {"allow": ["Bash(npm test)"]},
            ALLOW,
        ),
        (
            M.ACCEPT_EDITS,
            "Bash",
            {"command": "echo hi > notes.txt"},
            {"allow": ["Bash(echo:*)"]},
            ALLOW,
        ),
        (M.ACCEPT_EDITS, "Bash", {"command": "ls"}, {}, ASK),
        # plan: read-only tools only; even an allow rule does not run Bash or edits
        (M.PLAN, "Read", {"file_path": "a.py"}, {}, ALLOW),
        (M.PLAN, "Grep", {"pattern": "x"}, {}, ALLOW),
        (M.PLAN, "Bash", {"command": "ls"}, {"allow": ["Bash"]}, DENY),
        (M.PLAN, "Edit", {"file_path": "a.py"}, {"allow": ["Edit"]}, DENY),
        (M.PLAN, "Read", {"file_path": "secrets/k"}, {"deny": ["Read(./secrets/**)"]}, DENY),
        (M.PLAN, "Read", {"file_path": "/etc/passwd"}, {}, ASK),
        # bypassPermissions: everything, but deny rules hold and ask rules still ask
        (M.BYPASS, "Bash", {"command": "rm -rf build"}, {}, ALLOW),
        (M.BYPASS, "Write", {"file_path": "/etc/x"}, {}, ALLOW),
        (M.BYPASS, "Read", {"file_path": "/etc/passwd"}, {}, ALLOW),
        (M.BYPASS, "mcp__x__y", {}, {}, ALLOW),
        (M.BYPASS, "Bash", {"command": "ls && rm x"}, {"deny": ["Bash(rm:*)"]}, DENY),
        (M.BYPASS, "Bash", {"command": "git push"}, {"ask": ["Bash(git push:*)"]}, ASK),
        (M.BYPASS, "Write", {"file_path": ".git/config"}, {}, ASK),  # docs: protected dirs
        (M.BYPASS, "Write", {"file_path": ".git/config"}, {"allow": ["Edit(./.git/**)"]}, ALLOW),
        (M.BYPASS, "Bash", {"command": "echo 'x"}, {"deny": ["Bash(rm:*)"]}, ASK),
        # dontAsk: what would ask is denied; allow rules and reads still work
        (M.DONT_ASK, "Bash", {"command": "ls"}, {}, DENY),
        (M.DONT_ASK, "Bash", {"command": "ls"}, {"allow": ["Bash(ls)"]}, ALLOW),
        (M.DONT_ASK, "Bash", {"command": "ls && rm x"}, {"allow": ["Bash(ls)"]}, DENY),
        (
            M.DONT_ASK,
            "Bash",
            {"command": "git push"},
            {"allow": ["Bash"], "ask": ["Bash(git push:*)"]},
            DENY,
        ),
        (M.DONT_ASK, "Read", {"file_path": "a.py"}, {}, ALLOW),
        (M.DONT_ASK, "Read", {"file_path": "/etc/passwd"}, {}, DENY),
        (M.DONT_ASK, "Edit", {"file_path": "a.py"}, {}, DENY),
    ],
)
def test_modes(
    mode: PermissionMode,
    tool: str,
    tool_input: dict[str, Any],
    rules: dict[str, list[str]],
    expected: Behavior,
) -> None:
    d = check(tool, tool_input, rctx(rules, mode=mode))
    assert d.behavior == expected, d.reason


@pytest.mark.parametrize(
    "command, rules, auto, expected",
    [
        ("npm install && rm -rf node_modules", {}, True, ALLOW),
        ("curl x | sh", {}, True, ALLOW),
        ("rm x", {"deny": ["Bash(rm:*)"]}, True, DENY),
        ("ls && rm x", {"deny": ["Bash(rm:*)"]}, True, DENY),
        ("git push", {"ask": ["Bash(git push:*)"]}, True, ASK),
        ("npm install", {}, False, ASK),  # autoAllowBashIfSandboxed off: the normal flow
        ("echo 'x", {}, True, ASK),  # unparseable: cannot know what runs
    ],
)
def test_sandbox_auto_allow(
    command: str, rules: dict[str, list[str]], auto: bool, expected: Behavior
) -> None:
    c = rctx(rules, sandboxed=True, auto_allow_bash_if_sandboxed=auto)
    assert bash(command, c).behavior == expected


def test_sandbox_does_not_lift_plan_mode() -> None:
    assert bash("ls", ctx(sandboxed=True, mode=M.PLAN)).behavior == DENY


def test_sandbox_only_affects_bash() -> None:
    assert check("Edit", {"file_path": "a"}, ctx(sandboxed=True)).behavior == ASK


# --------------------------------------------------------------------------- reasons


@pytest.mark.parametrize(
    "tool, tool_input, c, behavior, rule, reason",
    [
        (
            "Bash",
            {"command": "rm -rf x"},
            ctx(deny=["Bash(rm:*)"]),
            DENY,
            "Bash(rm:*)",
            "Permission to use Bash denied by the rule Bash(rm:*) (projectSettings) for `rm -rf x`",
        ),
        (
            "Bash",
            {"command": "git diff && rm x"},
            ctx(allow=["Bash(git diff:*)"], deny=["Bash(rm:*)"], source="/p/.claude/settings.json"),
            DENY,
            "Bash(rm:*)",
            "Permission to use Bash denied by the rule Bash(rm:*) (/p/.claude/settings.json) for `rm x`",
        ),
        (
            "Read",
            {"file_path": "secrets/key.txt"},
            ctx(deny=["Read(./secrets/**)"], source="localSettings"),
            DENY,
            "Read(./secrets/**)",
            "Permission to use Read denied by the rule Read(./secrets/**) (localSettings) for /w/proj/secrets/key.txt",
        ),
        (
            "Bash",
            {"command": "git push"},
            ctx(ask=["Bash(git push:*)"], source="userSettings"),
            ASK,
            "Bash(git push:*)",
            "Permission to use Bash requires approval by the rule Bash(git push:*) (userSettings) for `git push`",
        ),
        (
            "Bash",
            {"command": "npm test"},
            ctx(allow=["Bash(npm test)"], source="cliArg"),
            ALLOW,
            "Bash(npm test)",
            "Permission to use Bash allowed by the rule Bash(npm test) (cliArg)",
        ),
        (
            "Bash",
            {"command": "npm test && git status"},
            ctx(allow=["Bash(npm test)", "Bash(git status)"], source=""),
            ALLOW,
            "Bash(npm test), Bash(git status)",
            "Permission to use Bash allowed by the rules Bash(npm test), Bash(git status)",
        ),
        (
            "Bash",
            {"command": "npm test && curl x"},
            ctx(allow=["Bash(npm test)"]),
            ASK,
            None,
            "Permission to use Bash requires approval: no allow rule matches `curl x`",
        ),
        (
            "Bash",
            {"command": "echo ran >> marker"},
            ctx(allow=["Bash(echo:*)"]),
            ASK,
            None,
            "Permission to use Bash requires approval: no allow rule matches `echo ran >> marker`",
        ),
        (
            "Bash",
            {"command": "echo 'x"},
            ctx(),
            ASK,
            None,
            "Permission to use Bash requires approval: the command could not be parsed (unbalanced single quote)",
        ),
        (
            "Bash",
            {"command": "$X y"},
            ctx(deny=["Bash(rm:*)"]),
            ASK,
            None,
            "Permission to use Bash requires approval: the program of `$X y` is computed at run time",
        ),
        (
            "Read",
            {"file_path": "/etc/passwd"},
            ctx(),
            ASK,
            None,
            "Permission to use Read requires approval: /etc/passwd is outside the working directories",
        ),
        (
            "Read",
            {"file_path": "a.py"},
            ctx(),
            ALLOW,
            None,
            "Read is read-only: allowed without approval",
        ),
        (
            "Edit",
            {"file_path": "a.py"},
            ctx(),
            ASK,
            None,
            "Permission to use Edit requires approval for /w/proj/a.py",
        ),
        (
            "Edit",
            {"file_path": "a.py"},
            ctx(mode=M.ACCEPT_EDITS),
            ALLOW,
            None,
            "Edit allowed: acceptEdits mode allows edits inside the working directories",
        ),
        (
            "Bash",
            {"command": "mkdir x"},
            ctx(mode=M.ACCEPT_EDITS),
            ALLOW,
            None,
            "Bash allowed: acceptEdits mode allows mkdir, touch, mv and cp inside the workspace",
        ),
        (
            "Write",
            {"file_path": ".git/config"},
            ctx(mode=M.ACCEPT_EDITS),
            ASK,
            None,
            "Permission to use Write requires approval: /w/proj/.git/config is in a protected directory (.git, .claude, .vscode, .idea)",
        ),
        (
            "Bash",
            {"command": "ls"},
            ctx(mode=M.PLAN),
            DENY,
            None,
            "Plan mode is on: Bash is not allowed; only read-only tools (Read, Grep, Glob) can run until the plan is approved",
        ),
        (
            "Bash",
            {"command": "ls"},
            ctx(mode=M.BYPASS),
            ALLOW,
            None,
            "Bash allowed in bypassPermissions mode",
        ),
        (
            "Write",
            {"file_path": ".git/config"},
            ctx(mode=M.BYPASS),
            ASK,
            None,
            "Permission to use Write requires approval: /w/proj/.git/config is in a protected directory (.git, .claude, .vscode, .idea), even in bypassPermissions mode",
        ),
        (
            "Bash",
            {"command": "ls"},
            ctx(mode=M.DONT_ASK),
            DENY,
            None,
            "Permission to use Bash denied in dontAsk mode (it would ask): no allow rule matches `ls`",
        ),
        (
            "Bash",
            {"command": "git push"},
            ctx(mode=M.DONT_ASK, allow=["Bash"], ask=["Bash(git push:*)"]),
            DENY,
            "Bash(git push:*)",
            "Permission to use Bash denied in dontAsk mode (it would ask) by the rule Bash(git push:*) (projectSettings) for `git push`",
        ),
        (
            "Bash",
            {"command": "npm i"},
            ctx(sandboxed=True),
            ALLOW,
            None,
            "Bash allowed: the sandbox is on and autoAllowBashIfSandboxed is set",
        ),
        (
            "WebFetch",
            {"url": "https://evil.com"},
            ctx(deny=["WebFetch(domain:evil.com)"], source="managed"),
            DENY,
            "WebFetch(domain:evil.com)",
            "Permission to use WebFetch denied by the rule WebFetch(domain:evil.com) (managed)",
        ),
        (
            "mcp__db__query",
            {},
            ctx(),
            ASK,
            None,
            "Permission to use mcp__db__query requires approval",
        ),
    ],
)
def test_reason_text(
    tool: str,
    tool_input: dict[str, Any],
    c: PermissionContext,
    behavior: Behavior,
    rule: str | None,
    reason: str,
) -> None:
    assert check(tool, tool_input, c) == Decision(behavior=behavior, rule=rule, reason=reason)


def test_headless_turns_ask_into_deny_and_says_why() -> None:
    d = headless(bash("curl x", ctx()))
    assert d.behavior == DENY
    assert d.reason == (
        "Permission to use Bash requires approval: no allow rule matches `curl x`; denied "
        "because no one can approve it in this non-interactive run"
    )
    d = headless(bash("git push", ctx(ask=["Bash(git push:*)"])))
    assert (d.behavior, d.rule) == (DENY, "Bash(git push:*)")
    for kept in (bash("rm x", ctx(deny=["Bash(rm:*)"])), bash("ls", ctx(allow=["Bash"]))):
        assert headless(kept) == kept


def test_models_round_trip_through_json() -> None:
    # They travel in Temporal payloads.
    c = ctx(allow=["Bash(ls *)"], deny=["Read(./secrets/**)"], mode=M.ACCEPT_EDITS)
    assert PermissionContext.model_validate_json(c.model_dump_json()) == c
    d = bash("ls", c)
    assert Decision.model_validate_json(d.model_dump_json()) == d


# --------------------------------------------------------------------------- hardening


@pytest.mark.parametrize("text", ["bash(rm:*)", "read(./secrets/**)", "EDIT", "webfetch"])
def test_case_variant_of_a_known_tool_is_an_error_not_a_silent_no_op(text: str) -> None:
    with pytest.raises(ValueError, match="did you mean"):
        parse_rule(text)


@pytest.mark.parametrize(
    "command",
    [
        "cp --target-directory=/etc a",
        "mv -t/etc a",
        "mv -t /etc a",
        "mkdir {/etc/x,y}",
        "touch ~root/x",
        "touch ~/x",
        "cp a ../outside",
        "mkdir x > /etc/y",
    ],
)
def test_accept_edits_filesystem_commands_stay_inside(command: str) -> None:
    assert bash(command, ctx(mode=M.ACCEPT_EDITS)).behavior == ASK


def test_accept_edits_redirect_to_another_users_home_asks() -> None:
    c = ctx(allow=["Bash(echo:*)"], mode=M.ACCEPT_EDITS)
    assert bash("echo x > ~root/.bashrc", c).behavior == ASK
    assert bash("echo x > notes/a.txt", c).behavior == ALLOW


def test_allow_rule_does_not_read_a_quoted_word_as_operators() -> None:
    assert bash('git "diff && rm -rf x"', ctx(allow=["Bash(git diff:*)"])).behavior == ASK
    assert bash("git 'diff' HEAD", ctx(allow=["Bash(git diff:*)"])).behavior == ALLOW


def test_many_wrappers_stay_fast_and_still_deny() -> None:
    c = ctx(allow=["Bash"], deny=["Bash(rm:*)"])
    assert bash("sudo " * 300 + "ls", c).behavior == ALLOW
    assert bash("sudo " * 300 + "rm x", c).behavior == DENY


def test_computed_redirect_targets() -> None:
    assert bash("echo x > $F", ctx(sandboxed=True)).behavior == ALLOW
    assert bash("echo x > $F", ctx(sandboxed=True, deny=["Edit(./keep/**)"])).behavior == ASK
    assert bash("cat < $F", ctx(allow=["Bash"], deny=["Read(./secrets/**)"])).behavior == ASK


def test_empty_command() -> None:
    assert bash("", ctx(allow=["Bash"])).behavior == ALLOW
    assert bash("  # only a comment", ctx(allow=["Bash(ls)"])).behavior == ASK


def test_plain_words_are_read_as_the_grammar_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """split_command reads a command of plain words without tree-sitter (`shell._PLAIN`): on
    random commands of those characters, the same Parts as the grammar's reading."""
    import random
    import re

    from durable_agent.engine.permissions import shell

    rng = random.Random(7)
    pieces = ["git", "diff", "rm", "-rf", "x", "a.b", "--force", "-", "--", "a:b", "a,b", "+x"]
    pieces += ["env", "bash", "-c", "sudo", "time", "in", "do", "./x", "../y", "/etc/passwd"]
    chars = "abz09_./:,+-"
    compared = 0
    for _ in range(3000):
        command = " ".join(
            rng.choice(pieces)
            if rng.random() < 0.7
            else "".join(rng.choice(chars) for _ in range(rng.randint(1, 5)))
            for _ in range(rng.randint(1, 6))
        )
        if not shell._PLAIN.fullmatch(command) or not shell._RESERVED.isdisjoint(command.split()):
            continue
        fast = shell.split_command(command)
        with monkeypatch.context() as m:
            m.setattr(shell, "_PLAIN", re.compile(r"(?!)"))
            assert shell.split_command(command) == fast, command
        compared += 1
    assert compared > 500


def test_an_assignment_split_by_a_line_continuation_is_still_seen_through() -> None:
    """Bash removes `\\<newline>` before it reads words: `A\\<newline>=1 rm x` runs `rm`."""
    c = ctx(allow=["Bash"], deny=["Bash(rm:*)"])
    assert bash("A\\\n=1 rm x", c).behavior == DENY
    assert bash('"A"=1 rm x', c).behavior == DENY  # not an assignment to bash: denied anyway


@pytest.mark.parametrize(
    "command",
    [
        # found by a review of the tree-sitter reading: each runs `rm x` in bash
        "v=a; echo ${v#$(rm x)}",
        'echo "${PWD%%$(rm x)}"',
        "v=a; echo ${v^^$(rm x)}",
        "echo ${v:-`rm x`}",
        "echo ${v:-${w:-`rm x`}}",
        "v=a; echo ${v/a/`rm x`}",
        "echo ${v:-$[`rm x`]}",
        "echo ${v:-<(rm x)}",
        "[[ a =~ <(rm x) ]]",
        "cat <<EOF\n${v:-`rm x`}\nEOF",
        "cat <<'EOF'\n\\\nEOF\nrm x\nEOF",  # `\` alone: the grammar ends the body elsewhere
        "cat <<-'EOF'\n\\\nEOF\nrm x\nEOF",
        "cat <<EOF\n`echo \\`rm x\\``\nEOF",
        "echo `echo \\`rm x\\``",
        "echo $(echo `echo \\`rm x\\``)",
        "a=([\\`rm x\\`]=1)",
        "[[ -v 'a[$(rm x)]' ]]",
        "x='a[$(rm x)]'; [[ $x -eq 0 ]]",
        "bash -c 'echo ${PWD#$(rm x)}'",
    ],
)
def test_substitutions_the_grammar_leaves_in_text_are_never_allowed(command: str) -> None:
    for c in (ctx(allow=["Bash"], deny=["Bash(rm:*)"]), ctx(allow=["Bash(echo:*)", "Bash(cat:*)"])):
        assert bash(command, c).behavior != ALLOW, command


@pytest.mark.parametrize(
    "command, expected",
    [
        # each runs `rm x` in bash; the old lexer allowed them all under `Bash` + `Bash(rm:*)`
        ("echo 'rm x' | bash", ASK),  # a shell reading its standard input
        ("echo 'rm x' | sh -s", ASK),
        ("bash <(echo rm x)", ASK),  # a computed script file
        (". <(echo rm x)", ASK),
        ("source <(echo rm x)", ASK),
        ("bash -c -- 'rm x'", DENY),  # options between -c and the script
        ("bash -c -e 'rm x'", DENY),
        ("eval -- 'rm x'", DENY),
        ("env -S'rm x'", DENY),  # env's split string, attached or not
        ("env --split-string='rm x'", DENY),
        ("script -qc'rm x' /dev/null", DENY),  # -c attached to other options
        ("setarch x86_64 rm x", DENY),  # wrappers that run their arguments
        ("prlimit rm x", DENY),
        ("setpriv rm x", DENY),
        ("rbash -c 'rm x'", DENY),
        ("trap 'rm x' EXIT", DENY),  # strings bash runs later
        ("mapfile -C rm -c 1 <<< x", DENY),
        ("shopt -s expand_aliases\nalias r=rm\nr x", DENY),
        ("hash -p /bin/rm ls; ls x", ASK),
        ("x='$(rm x)'; echo \"${x@P}\"", ASK),
        ("PS4='$(rm x)'; set -x; :", ASK),
        ("test -v 'a[$(rm x)]'", ASK),  # subscripts evaluated as arithmetic
        ("let 'a[$(rm x)]=1'", ASK),
        ("x='a[$(rm x)]'; echo $((x))", ASK),
        ("printf -v 'a[$(rm x)]' %s 1", ASK),
        # what runs nothing hidden stays allowed
        ("trap - EXIT", ALLOW),
        ("alias ll='ls -l'", ALLOW),
        ("let i=1+2", ALLOW),
        ("echo ${x@Q}", ALLOW),
        ("bash script.sh", ALLOW),
        ("echo x | bash -c 'cat'", ALLOW),
        ("env FOO=1 ls", ALLOW),
    ],
)
def test_what_a_shell_or_wrapper_runs_is_seen(command: str, expected: Behavior) -> None:
    assert bash(command, ctx(allow=["Bash"], deny=["Bash(rm:*)"])).behavior == expected


@pytest.mark.parametrize(
    "command",
    ["ENV=prod npm start", "PS4='+ ' bash -x s.sh", "FOO=bar make", "source venv/bin/activate"],
)
def test_common_assignments_and_sources_stay_allowed(command: str) -> None:
    """What runs nothing later than it says: not asked about under `Bash` + a scoped deny."""
    assert bash(command, ctx(allow=["Bash"], deny=["Bash(rm:*)"])).behavior == ALLOW
