"""The shell, as far as checking a command's parts needs it, read with tree-sitter-bash.

`split_command` parses a command line with the maintained tree-sitter grammar for bash and
returns its simple commands (`Part`: words, and the targets of its redirections): the commands of
lists (`&&`, `||`, `;`, `&`, newlines), pipelines, subshells, `{ ...; }` groups, `if`/`while`/
`for`/`case` bodies, function bodies and `[[ ... ]]` tests, with the bodies of `$(...)`, backticks
and `<(...)` / `>(...)` as parts of their own. Quotes are bash's (a `;` inside quotes is an
argument). A here-document's body is data: only the substitutions of an unquoted one run; when
the command line holds a program that runs its standard input as commands (a shell, `ssh`,
`xargs`, ...) the bodies of its here-documents and here-strings are checked as scripts, and fed
to another interpreter (`python3 -`, `node`, ...) they are a part whose program is computed at
run time. A tree with an error (tree-sitter recovers from errors: an ERROR or MISSING node), a
construct this module does not know, or a reading the grammar and bash might not share is a
ShellParseError, which the rules treat as unparseable.

Checking a Bash command takes time linear in its length: the grammar parses in linear time, the
tree is walked with an explicit stack, and a command whose analysis would cost more than a fixed
multiple of its length (`_Work`) raises TooComplex and counts as unparseable.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Node, Parser


class ShellParseError(ValueError):
    pass


class TooComplex(ShellParseError):
    """The command would take more work to check than its length warrants (deeply nested
    substitutions, wrappers around thousands of words): it is checked as unparseable."""


class _Work:
    """What one command's analysis may still scan (characters of text, parsed or matched):
    a fixed multiple of the command's length, so that checking it stays linear."""

    FACTOR, BASE = 16, 1 << 20

    def __init__(self, command: str) -> None:
        self.left = self.FACTOR * len(command) + self.BASE

    def spend(self, chars: int) -> None:
        self.left -= chars
        if self.left < 0:
            raise TooComplex("the command is too complex to check against the permission rules")


@dataclass
class Word:
    value: str
    """The word after quote removal (what the program receives, expansions left as written)."""
    raw: str
    """The word as written."""
    dynamic: bool = False
    """Contains an unquoted or double-quoted expansion ($VAR, $(...), `...`) or a glob."""
    redirect: str = ""
    """For a redirection's target, its operator as written (`>`, `>>`, `&>`, ...)."""


@dataclass
class Part:
    """One simple command of a compound command line."""

    words: list[Word] = field(default_factory=list)
    writes: list[Word] = field(default_factory=list)
    """Targets of output redirections (`>`, `>>`, `&>`, ...)."""
    reads: list[Word] = field(default_factory=list)
    """Targets of input redirections (`<`)."""
    deny_only: bool = False
    """A reading of ambiguous text as a command (`$((...))` may be a subshell in a command
    substitution): deny and ask rules see it, allow rules need not cover it."""

    def text(self) -> str:
        return " ".join(w.raw for w in self.words)


_MAX_DEPTH = 8
"""How deep scripts inside scripts are read (`sh -c`, here-documents to a shell, `$((...))`)."""

_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "mksh"})
# Programs that run what their standard input says as commands: a here-document or here-string
# on a command line that holds one of them is checked as a script (Safer reading: whichever
# command of the line it is attached to, since it may reach one through a pipe or `$(...)`).
_STDIN_SCRIPTS = _SHELLS | frozenset(
    {
        "ssh", "xargs", "parallel", "source", ".", "eval", "sudo", "su", "doas", "runuser",
        "busybox", "script", "at", "batch", "crontab", "tmux", "screen",
    }
)  # fmt: skip
# Interpreters of other languages: what they read from a here-document cannot be checked.
_INTERPRETERS = re.compile(
    r"(?:python|pypy|node|nodejs|deno|bun|perl|ruby|irb|php|lua|luajit|tclsh|wish|expect"
    r"|Rscript|R|julia|osascript|swift|groovy|scala|jshell|ghci|pwsh|powershell|gdb|lldb"
    r"|awk|gawk|mawk|nawk|sed|psql|mysql|mariadb|sqlite3|duckdb|mongo|mongosh|redis-cli"
    r"|docker|kubectl|podman)[0-9.]*(?:\.exe)?"
)

# Nodes whose value is their text as written, an expansion: dynamic.
_EXPANSIONS = frozenset(
    {
        "simple_expansion", "expansion", "command_substitution", "process_substitution",
        "arithmetic_expansion", "ansi_c_string", "translated_string", "brace_expression",
        "array", "subscript",
    }
)  # fmt: skip
# Nodes whose value is their text as written, and nothing to expand.
_LITERALS = frozenset(
    {"number", "variable_name", "special_variable_name", "test_operator", "file_descriptor"}
)
# Unquoted text (backslash escapes, globs).
_UNQUOTED = frozenset({"word", "extglob_pattern", "regex"})
_WORDS = _EXPANSIONS | _LITERALS | _UNQUOTED | {"string", "raw_string", "concatenation"}
# Commands that are parts, built from their children (`_simple`).
_SIMPLE = frozenset({"command", "declaration_command", "unset_command", "variable_assignments"})
# Nodes only walked through: what runs is in their children.
_STRUCTURE = _WORDS | frozenset(
    {
        "program", "list", "pipeline", "subshell", "compound_statement", "if_statement",
        "elif_clause", "else_clause", "while_statement", "for_statement", "do_group",
        "c_style_for_statement", "case_statement", "case_item", "function_definition",
        "negated_command", "binary_expression", "unary_expression", "parenthesized_expression",
        "postfix_expression", "ternary_expression", "file_redirect", "heredoc_content",
        "heredoc_start", "heredoc_end", "string_content", "command_name", "comment",
    }
)  # fmt: skip
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_BLANK = re.compile(rb"(?:[ \t\n]|\\\n)*")
_LONE_DASH = re.compile(rb"[ \t]+-[ \t]+")
_DUPLICATE = re.compile(rb"\d*-?|-")
_CONTINUATIONS = re.compile(rb"(?:\\\n)*")
_PLAIN_WORD = re.compile(r"[^\\$*?\[{~]*")
_GLOB = re.compile(r"[$*?\[]")
_ESCAPE = re.compile(r"\\(.)|\\$", re.DOTALL)
_ESCAPED = re.compile(r"\\.", re.DOTALL)
_SUBSTITUTION = re.compile(r"`|\$\(|\$\[|<\(|>\(")
"""What starts a command (or arithmetic) substitution or a process substitution."""
_ESCAPED_SUBSTITUTION = re.compile(r"\\[`$]")
_ARITHMETIC_TESTS = frozenset({"-v", "-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_INERT_LEAVES = frozenset({"raw_string", "ansi_c_string", "comment", "heredoc_start"})
"""Leaves whose text runs nothing: single-quoted, `$'...'`, a comment, a delimiter."""
# In an unquoted here-document a backslash quotes only \\, $, ` and a newline; `"` is itself.
_HEREDOC_TO_DQ = re.compile(r'(\\[\\$`\n])|(\\)|"')
_DQ_ESCAPE = re.compile(r'\\([\\"$`\n])')

_parser: Parser | None = None


def _get_parser() -> Parser:
    global _parser
    if _parser is None:
        import tree_sitter_bash
        from tree_sitter import Language, Parser

        _parser = Parser(Language(tree_sitter_bash.language()))
    return _parser


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")


def is_assignment(word: Word) -> bool:
    """A `VAR=value` word: as written, or once a line continuation is gone (`A\\<newline>=1`)."""
    return _ASSIGNMENT.match(word.raw) is not None or _ASSIGNMENT.match(word.value) is not None


_PLAIN = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./-]*(?: [A-Za-z0-9_./:,+-]+)*")
"""A command of plain words, one space apart, read without the grammar (the same Parts: no
quote, expansion, glob, operator, redirection or assignment; a command name the grammar reads as
a word): the nested scripts of `bash -c x` wrappers, most often, which would otherwise cost a
parse each. Checked against the grammar's reading on random commands of these characters."""
_RESERVED = frozenset(
    "! case coproc do done elif else esac fi for function if in select then time until while"
    " { } [[ ]]".split()
)


def split_command(
    command: str, _depth: int = 0, work: _Work | None = None, *, _in_arithmetic: bool = False
) -> list[Part]:
    """Every simple command in `command` (see the module docstring), in the order they appear,
    a command substitution's before the command it is an argument of. ShellParseError for what
    the grammar cannot read (unbalanced quotes or parentheses, `if then`, ...); TooComplex when
    the work (`work`, shared by the whole command) runs out."""
    if _depth > _MAX_DEPTH:
        raise ShellParseError("command substitutions nested too deep")
    work = work or _Work(command)
    work.spend(len(command))
    if not _in_arithmetic and _PLAIN.fullmatch(command):
        words = command.split(" ")
        if _RESERVED.isdisjoint(words):  # plain words: what the grammar would give, at once
            return [Part(words=[Word(w, w) for w in words])]
    src = command.encode("utf-8", "surrogatepass")
    root = _get_parser().parse(src).root_node
    if root.has_error and b"$((" in src:
        # Bash reads a `$((` that does not close as arithmetic as `$( (`: a command
        # substitution of a subshell (`$((rm x) )`). Read that way, every `$((` is commands.
        work.spend(len(command))
        retry = src.replace(b"$((", b"$( (")
        tree = _get_parser().parse(retry).root_node
        if not tree.has_error:
            src, root = retry, tree
    if root.has_error:
        raise ShellParseError(_error(root, src))
    walker = _Walker(src, _depth, work)
    walker.in_arithmetic = _in_arithmetic
    return walker.walk(root)


_UNBALANCED = {
    "'": "unbalanced single quote",
    '"': "unbalanced double quote",
    "`": "unbalanced backtick",
    ")": "unbalanced parenthesis",
    "}": "unbalanced brace",
}


def _error(root: Node, src: bytes) -> str:
    """What the first ERROR or MISSING node is, for the reason shown."""
    stack = [root]
    while stack:
        node = stack.pop()
        where = f"at character {_char(src, node.start_byte)}"
        if node.is_missing:
            return _UNBALANCED.get(node.type, f"`{node.type}` missing {where}")
        if node.is_error:
            text = src[node.start_byte : node.end_byte].decode("utf-8", "replace").lstrip()
            return _UNBALANCED.get(text[:1], f"unexpected text {where}")
        stack.extend(c for c in reversed(node.children) if c.has_error)
    return "the shell grammar could not read it"


def _char(src: bytes, byte: int) -> int:
    return len(src[:byte].decode("utf-8", "surrogatepass")) + 1


class _Walker:
    def __init__(self, src: bytes, depth: int, work: _Work) -> None:
        self.src, self.depth, self.work = src, depth, work
        self.parts: list[Part] = []
        # Here-documents' bodies and here-strings: what a program reading its stdin as a
        # script would run. (text, or None when it is computed at run time)
        self.stdin: list[str | None] = []
        self.in_command: set[int] = set()
        self.arithmetic_end = -1
        self.in_arithmetic = False

    def _check_gaps(self, node: Node) -> None:
        """The grammar reads every character bash would: between a node's children there is
        only blank space. (tree-sitter-bash drops some text: `'a'\\ b` loses its escaped space,
        `cat - <<EOF` its `-`.) Line continuations join words only inside a command (`_merge`)."""
        at = node.start_byte
        children = node.children
        for i in range(len(children) + 1):
            end = children[i].start_byte if i < len(children) else node.end_byte
            if end > at:
                gap = self.src[at:end]
                if node.type == "concatenation" or not _BLANK.fullmatch(gap):
                    if not (  # the `-` of `cat - <<EOF`: a word of the command
                        node.type == "redirected_statement"
                        and _LONE_DASH.fullmatch(gap)
                        and 0 < i < len(children)
                        and children[i - 1].type == "command"
                        and children[i].type == "heredoc_redirect"
                    ):
                        raise ShellParseError(
                            f"text the shell grammar skipped at character {_char(self.src, at)}"
                        )
                elif (
                    b"\\\n" in gap
                    and _CONTINUATIONS.fullmatch(gap)
                    and 0 < i < len(children)
                    and (
                        node.type not in _SIMPLE
                        or children[i - 1].type in _REDIRECTS
                        or children[i].type in _REDIRECTS
                    )
                ):
                    raise ShellParseError(
                        f"a line continuation inside a token at character {_char(self.src, at)}"
                    )
            if i < len(children):
                at = children[i].end_byte

    def text(self, node: Node) -> str:
        return self.src[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")

    def walk(self, root: Node) -> list[Part]:
        # An explicit stack: a node to visit, or a part to emit once its children are visited.
        stack: list[Node | Part] = [root]
        while stack:
            item = stack.pop()
            if isinstance(item, Part):
                self.parts.append(item)
                continue
            self.work.spend(4)
            stack.extend(reversed(self.visit(item)))
        self._stdin_scripts()
        return self.parts

    def visit(self, node: Node) -> list[Node | Part]:
        """What to visit (or emit) next for `node`, in order."""
        t = node.type
        if not node.is_named:
            if "`" in t and t != "`":  # see _value
                raise ShellParseError("backtick substitutions the grammar reads as one")
            return []
        if node.child_count and t not in ("string", "heredoc_body"):
            self._check_gaps(node)
        elif not node.child_count and t not in _INERT_LEAVES:
            # A leaf is text the grammar did not read into parts: a substitution in it (the
            # operand of `${v#$(rm x)}`, `${v:-`rm x`}`, a `[[ =~ <(rm x) ]]` regex) would
            # run unseen.
            bare = _ESCAPED.sub("", self.text(node))
            if _SUBSTITUTION.search(bare):
                raise ShellParseError("a substitution the shell grammar did not read")
        if t in ("array", "subscript") and _ESCAPED_SUBSTITUTION.search(self.text(node)):
            # a subscript is evaluated as arithmetic after quote removal: `a=([\`rm x\`]=1)`
            raise ShellParseError("an escaped substitution in an array subscript")
        if t == "command_substitution" and self.text(node).startswith("`"):
            inner = self.text(node)[1:-1]
            if "\\`" in inner or "\\$" in inner:  # nested backticks: bash's own quoting
                raise ShellParseError("backticks nested in backticks")
        if t in _SIMPLE:
            part = Part()
            todo = self._simple(node, part)
            return [*todo, part]
        if t == "variable_assignment":
            if node.id in self.in_command:  # a command's `VAR=value` (see _simple)
                return list(node.children)
            return [*node.children, Part(words=[self._assignment(node)])]
        if t == "redirected_statement":
            return self._redirected(node)
        if t == "test_command":
            words = self._flatten(node)
            if words and any(w.value in _ARITHMETIC_TESTS for w in words):
                # `-v NAME[...]` and `-eq`/`-lt`/... evaluate subscripts and operands as
                # arithmetic, which runs `$(...)` written in a variable or a quoted word: the
                # test counts as computed (asked about) unless every word is plain.
                if any(w.dynamic or "[" in w.value or "$" in w.value for w in words[1:]):
                    words[0] = Word(words[0].value, words[0].raw, True)
            part = Part(words=words)
            return [*node.children, part]
        if t == "heredoc_redirect":
            return self._heredoc(node)
        if t == "c_style_for_statement":  # `for ((i = 0; ...))`: arithmetic, not a command
            self.in_command.update(c.id for c in node.children if c.type == "variable_assignment")
            return list(node.children)
        if t == "herestring_redirect":
            target = [c for c in node.named_children if c.type in _WORDS]
            if len(target) != 1:
                raise ShellParseError("a here-string without one word")
            word = self.word(target[0])
            self.stdin.append(None if word.dynamic else word.value)
            return list(node.children)
        if t == "arithmetic_expansion":
            self._arithmetic(node)
            return list(node.children)
        if t in _STRUCTURE:
            return list(node.children)
        raise ShellParseError(f"a shell construct this check does not read ({t})")

    # ---------------------------------------------------------------- commands

    def _simple(
        self, node: Node, part: Part, extra: list[tuple[int, int, Word]] | None = None
    ) -> list[Node | Part]:
        """Fill `part` with the words and redirections of a simple command (`extra`: words the
        grammar put in the redirections after it); returns what to visit for the commands
        inside them."""
        words = list(extra or [])
        todo: list[Node | Part] = []
        for child in node.children:
            t = child.type
            todo.append(child)
            if t == "variable_assignment":
                self.in_command.add(child.id)
                word = self._assignment(child)
            elif t == "command_name":
                word = self.word(child, concat=True)
            elif t in _REDIRECTS:
                words.extend(self._redirect(child, part))
                continue
            elif t == "comment":
                continue
            elif t == "$":  # `$"..."` read as `$` and a string: merged below
                word = Word("$", "$", True)
            elif child.is_named or node.type != "command":  # or `export`, `unset`, ...
                word = self.word(child)
            else:
                raise ShellParseError(f"unexpected `{t}` in a command")
            words.append((child.start_byte, child.end_byte, word))
        words.sort(key=lambda w: w[0])
        part.words = self._merge(words)
        return todo

    def _merge(self, words: list[tuple[int, int, Word]]) -> list[Word]:
        """Words the grammar split where bash does not: touching ones (`$"x"`), and ones joined
        by line continuations (`r\\<newline>m` is `rm`)."""
        merged: list[Word] = []
        end = -1
        for start, stop, word in words:
            if merged and _CONTINUATIONS.fullmatch(self.src, end, start):
                last = merged[-1]
                raw = last.raw + self.src[end:start].decode() + word.raw
                merged[-1] = Word(last.value + word.value, raw, last.dynamic or word.dynamic)
            else:
                merged.append(word)
            end = stop
        return merged

    def _redirected(self, node: Node) -> list[Node | Part]:
        body = node.child_by_field_name("body")
        part = Part()
        extra: list[tuple[int, int, Word]] = []
        redirects: list[Node | Part] = []
        prev: Node | None = None
        for child in node.children:
            if child.type in _REDIRECTS:
                if (
                    child.type == "heredoc_redirect"
                    and prev is not None
                    and prev == body
                    and _LONE_DASH.fullmatch(self.src, prev.end_byte, child.start_byte)
                ):  # see _check_gaps
                    dash = self.src.index(b"-", prev.end_byte)
                    extra.append((dash, dash + 1, Word("-", "-")))
                extra.extend(self._redirect(child, part))
                redirects.append(child)
            elif child != body and child.type != "comment" and child.is_named:
                raise ShellParseError(f"unexpected {child.type} after a command")
            prev = child
        if body is not None and body.type in _SIMPLE:
            todo = self._simple(body, part, extra)
        elif extra:
            raise ShellParseError("words after a redirection of a compound command")
        else:
            todo = [body] if body is not None else []
        return [*todo, *redirects, part]

    def _redirect(self, node: Node, part: Part) -> list[tuple[int, int, Word]]:
        """Record a redirection's target on `part`; returns the words after the target that
        the grammar put in the redirection (`2>/dev/null rm x`: bash's arguments)."""
        if node.type == "heredoc_redirect":
            for child in node.children:
                if child.type == "file_redirect":
                    self._redirect(child, part)
            return []
        if node.type == "herestring_redirect":
            return []
        op = next((c for c in node.children if not c.is_named), None)
        targets = node.children_by_field_name("destination")
        if op is None:
            raise ShellParseError("a redirection without an operator")
        if op.type in ("<&-", ">&-"):
            return []  # closes a descriptor
        if not targets:
            raise ShellParseError("a redirection without a target")
        target, rest = targets[0], targets[1:]
        word = self.word(target)
        if op.type in (">&", "<&") and _DUPLICATE.fullmatch(word.value.encode()):
            pass  # `2>&1`: a descriptor, not a file
        elif op.type.startswith("<") and op.type not in ("<>",):
            part.reads.append(word)
        elif op.type in (">", ">>", "&>", "&>>", ">|", ">&", "<>"):
            word.redirect = op.type
            part.writes.append(word)
        else:
            raise ShellParseError(f"a redirection this check does not read ({op.type})")
        return [(n.start_byte, n.end_byte, self.word(n)) for n in rest]

    def _heredoc(self, node: Node) -> list[Node | Part]:
        start = next((c for c in node.children if c.type == "heredoc_start"), None)
        end = next((c for c in node.children if c.type == "heredoc_end"), None)
        body = next((c for c in node.children if c.type == "heredoc_body"), None)
        strip_tabs = any(c.type == "<<-" for c in node.children)
        for child in node.children:
            if child.type in _WORDS:
                # `\` alone on the body's first line: the grammar reads it as a line
                # continuation and ends the body elsewhere than bash does.
                raise ShellParseError("a here-document the shell grammar reads differently")
        if start is None or end is None:
            raise ShellParseError("a here-document without its delimiter")
        raw = self.text(start)
        quoted = any(q in raw for q in "'\"\\")
        delimiter = _ESCAPE.sub(lambda m: m.group(1) or "", raw.replace("'", "").replace('"', ""))
        # The body must end where bash ends it: at the first line that is the delimiter (after
        # its leading tabs, for `<<-`), and nowhere else.
        text = self.text(body) if body is not None else ""
        line_start = self.src.rfind(b"\n", 0, end.start_byte) + 1
        indent = self.src[line_start : end.start_byte].decode("utf-8", "surrogatepass")
        after = self.src[end.end_byte : end.end_byte + 1]
        if (
            self.text(end) != delimiter
            or indent.strip("\t" if strip_tabs else "")
            or after not in (b"", b"\n")
            or any(
                (line.lstrip("\t") if strip_tabs else line) == delimiter
                for line in text.split("\n")[:-1]
            )
        ):
            raise ShellParseError("a here-document whose end is not clear")
        self.work.spend(len(text))
        self.stdin.append(text)
        if not quoted and body is not None:
            self._expand_heredoc(text)
        return [c for c in node.children if c.type != "heredoc_body"]

    def _expand_heredoc(self, text: str) -> None:
        """The commands an unquoted here-document's body runs when it is expanded: those of
        the same text in double quotes (the grammar does not read backticks in a body)."""
        quoted = _HEREDOC_TO_DQ.sub(lambda m: m.group(1) or ("\\\\" if m.group(2) else '\\"'), text)
        parts = split_command(f': "{quoted}"', self.depth + 1, self.work)
        if not parts or [w.raw for w in parts[-1].words][:1] != [":"]:
            raise ShellParseError("a here-document whose expansions could not be read")
        self.parts.extend(parts[:-1])

    def _arithmetic(self, node: Node) -> None:
        """`$((body))`: Safer reading, the body read as commands for deny and ask rules too,
        since bash may take `$((cmd) ...)` as a command substitution. Only the outermost one
        (its reading holds the ones inside it): reading each would be quadratic."""
        if node.start_byte < self.arithmetic_end or self.in_arithmetic:
            return
        self.arithmetic_end = node.end_byte
        text = self.text(node)
        if not (text.startswith("$((") and text.endswith("))")):
            return
        try:
            extra = split_command(text[3:-2], self.depth + 1, self.work, _in_arithmetic=True)
        except TooComplex:
            raise
        except ShellParseError:
            return
        for part in extra:
            part.deny_only = True
        self.parts.extend(extra)

    def _stdin_scripts(self) -> None:
        """Here-documents and here-strings on a line with a program that runs its stdin."""
        if not self.stdin:
            return
        shells: list[str] = []
        others: list[str] = []
        for part in self.parts:
            words = part.words
            i = 0
            while i < len(words) and is_assignment(words[i]):
                i += 1
            if i < len(words) and words[i].dynamic:
                shells.append(words[i].raw)
            for w in words:
                name = posixpath.basename(w.value)
                if w.dynamic:
                    continue
                if name in _STDIN_SCRIPTS:
                    shells.append(name)
                elif _INTERPRETERS.fullmatch(name):
                    others.append(name)
        if not shells and not others:
            return
        extra: list[Part] = []
        for script in self.stdin:
            if script is None or others:
                label = f"<the standard input of {(shells + others)[0]}>"
                extra.append(Part(words=[Word(label, label, True)]))
            if script is not None and shells:
                extra.extend(split_command(script, self.depth + 1, self.work))
        self.parts.extend(extra)

    # ---------------------------------------------------------------- words

    def _assignment(self, node: Node) -> Word:
        raw = self.text(node)
        value = node.child_by_field_name("value")
        if value is None:
            return Word(raw, raw)
        head = self.src[node.start_byte : value.start_byte].decode("utf-8", "surrogatepass")
        word = self.word(value)
        return Word(head + word.value, raw, word.dynamic)

    def _flatten(self, node: Node) -> list[Word]:
        """The words of a `[[ ... ]]` / `[ ... ]` test, operators included."""
        words: list[Word] = []
        stack = [node]
        while stack:
            n = stack.pop()
            self.work.spend(4)
            if n is not node and (n.type in _WORDS or n.child_count == 0):
                words.append(self.word(n))
            else:
                stack.extend(reversed(n.children))
        return words

    def word(self, node: Node, concat: bool = False) -> Word:
        """The Word of a word node: its value after quote removal, and whether it expands."""
        raw = self.text(node)
        self.work.spend(len(raw))
        if node.type == "word" and not concat and _PLAIN_WORD.fullmatch(raw):
            return Word(raw, raw)
        value, dynamic, brace = self._value(node, raw, concat or node.type == "concatenation")
        if (brace and raw != "{") or (raw.startswith("~") and not re.match(r"~(/|$)", raw)):
            dynamic = True  # `{/etc/x,y}` expands; `~name` is another user's home
        return Word(value, raw, dynamic)

    def _value(self, node: Node, raw: str, concat: bool, depth: int = 0) -> tuple[str, bool, bool]:
        t = node.type
        if depth > 3:
            raise ShellParseError("a word nested deeper than the grammar makes them")
        if concat:  # the pieces of one word, and what the grammar left between them
            out: list[str] = []
            dynamic = brace = False
            at = node.start_byte
            for child in node.children:
                if child.start_byte > at:
                    gap = self.src[at : child.start_byte].decode("utf-8", "surrogatepass")
                    v, d, b = _unquoted(gap)
                    out.append(v)
                    dynamic, brace = dynamic or d, brace or b
                if child.type in _WORDS or child.type == "$":
                    nested = child.type == "concatenation"
                    v, d, b = self._value(child, self.text(child), nested, depth + 1)
                else:  # `` `a` `b` `` is read as one command `a` `b`: not bash's reading
                    raise ShellParseError("backtick substitutions the grammar reads as one")
                out.append(v)
                dynamic, brace = dynamic or d, brace or b
                at = child.end_byte
            if at < node.end_byte:
                v, d, b = _unquoted(self.src[at : node.end_byte].decode())
                out.append(v)
                dynamic, brace = dynamic or d, brace or b
            return "".join(out), dynamic, brace
        if t in _UNQUOTED:
            return _unquoted(raw)
        if t == "raw_string":
            return raw[1:-1], False, False
        if t == "string":
            out = []
            dynamic = False
            at = node.start_byte + 1
            for child in node.children:
                if child.type == '"':
                    continue
                if child.start_byte > at:
                    v, d = _double_quoted(self.src[at : child.start_byte].decode())
                    out.append(v)
                    dynamic = dynamic or d
                if child.type == "string_content":
                    v, d = _double_quoted(self.text(child))
                else:  # an expansion (or a lone `$`)
                    v, d = self.text(child), True
                out.append(v)
                dynamic = dynamic or d
                at = child.end_byte
            if at < node.end_byte - 1:
                v, d = _double_quoted(self.src[at : node.end_byte - 1].decode())
                out.append(v)
                dynamic = dynamic or d
            return "".join(out), dynamic, False
        if t in _LITERALS:
            return raw, False, False
        if t in _EXPANSIONS or t == "$":
            return raw, True, False
        if node.child_count == 0:  # an operator or keyword of a test, `export`, ...
            return raw, False, False
        raise ShellParseError(f"a word this check does not read ({t})")


def _unquoted(text: str) -> tuple[str, bool, bool]:
    """Unquoted text: (value, has an expansion or glob, has a brace)."""
    bare = _ESCAPED.sub("", text) if "\\" in text else text
    dynamic = _GLOB.search(bare) is not None
    value = _ESCAPE.sub(lambda m: m.group(1) if m.group(1) not in (None, "\n") else "", text)
    return value, dynamic, "{" in bare


def _double_quoted(text: str) -> tuple[str, bool]:
    bare = _ESCAPED.sub("", text) if "\\" in text else text
    value = _DQ_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)
    return value, "$" in bare or "`" in bare
