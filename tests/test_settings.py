"""Settings files merged in Claude Code's precedence (issue 10, item 1): engine merge + file reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from activities.settings import load_settings, settings_layers
from durable_agent.engine.permissions import PermissionMode
from durable_agent.engine.settings import (
    SettingsError,
    SettingsLayer,
    merge,
    permission_context,
    split_tool_list,
    validate_layer,
)


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A workspace, a user home and a managed file, none written yet."""
    home = tmp_path / "home"
    workspace = tmp_path / "ws"
    (home / ".claude").mkdir(parents=True)
    (workspace / ".claude").mkdir(parents=True)
    paths = {
        "workspace": workspace,
        "user": home / ".claude" / "settings.json",
        "project": workspace / ".claude" / "settings.json",
        "local": workspace / ".claude" / "settings.local.json",
        "managed": tmp_path / "etc" / "managed-settings.json",
    }
    monkeypatch.setenv("DURABLE_AGENT_SETTINGS", str(paths["user"]))
    monkeypatch.setenv("DURABLE_AGENT_MANAGED_SETTINGS", str(paths["managed"]))
    return paths


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_scalars_follow_precedence_managed_cli_local_project_user(
    files: dict[str, Path], tmp_path: Path
) -> None:
    names = ["managed", "cli", "local", "project", "user"]
    # key k<i> is set by the layers from names[i] down: the highest of them must win
    for i, name in enumerate(names):
        data = {f"k{j}": name for j in range(i + 1)} | {"model": name}
        if name == "cli":
            write(tmp_path / "cli.json", data)
        else:
            write(files[name], data)
    merged = load_settings(files["workspace"], extra=str(tmp_path / "cli.json"))
    extra = merged.settings.model_extra or {}
    assert merged.settings.model == "managed"
    assert [extra[f"k{i}"] for i in range(5)] == names
    assert [x.source for x in merged.layers] == [
        "managed", "cliArg", "localSettings", "projectSettings", "userSettings",
    ]  # fmt: skip


def test_nested_scalars_fall_through_key_by_key(files: dict[str, Path]) -> None:
    write(files["user"], {"permissions": {"defaultMode": "plan"}, "sandbox": {"enabled": True}})
    write(files["project"], {"permissions": {"defaultMode": "acceptEdits"}})
    s = load_settings(files["workspace"]).settings
    assert s.permissions.default_mode == "acceptEdits"
    assert s.sandbox.enabled is True  # only the user file sets it


def test_arrays_concatenate_and_dedupe_across_layers(files: dict[str, Path]) -> None:
    write(files["user"], {"permissions": {"allow": ["Bash(ls:*)", "Read"], "deny": ["Bash(rm:*)"]}})
    write(files["project"], {"permissions": {"allow": ["Read", "Edit"], "deny": ["Bash(rm:*)"]}})
    write(
        files["local"],
        {"permissions": {"allow": ["Edit"], "additionalDirectories": ["../a", "../a"]}},
    )
    merged = load_settings(files["workspace"])
    p = merged.settings.permissions
    assert sorted(p.allow) == ["Bash(ls:*)", "Edit", "Read"]
    assert p.deny == ["Bash(rm:*)"]
    assert p.additional_directories == ["../a"]
    listed = [(r.behavior, r.rule, r.source) for r in merged.rules_with_source]
    # a rule in two files that share a root (local, project) is listed once, from the higher one
    assert listed == [
        ("allow", "Edit", "localSettings"),
        ("deny", "Bash(rm:*)", "projectSettings"),
        ("allow", "Read", "projectSettings"),
        ("deny", "Bash(rm:*)", "userSettings"),
        ("allow", "Bash(ls:*)", "userSettings"),
        ("allow", "Read", "userSettings"),
    ]
    assert merged.rules_with_source[-1].path == str(files["user"])


def test_rule_roots_project_is_the_workspace_user_is_home(files: dict[str, Path]) -> None:
    write(files["user"], {"permissions": {"deny": ["Read(/secrets/**)"]}})
    write(files["project"], {"permissions": {"deny": ["Read(/secrets/**)"]}})
    rules = load_settings(files["workspace"]).rules("deny")
    # the same text means a different folder in each file: both are kept, each with its root
    assert [(r.source, r.root) for r in rules] == [
        ("projectSettings", str(files["workspace"].resolve())),
        ("userSettings", str(files["user"].parent.parent)),
    ]


def test_hooks_from_every_layer_all_apply(files: dict[str, Path]) -> None:
    def group(cmd: str, matcher: str = "Bash") -> dict[str, Any]:
        return {"matcher": matcher, "hooks": [{"type": "command", "command": cmd}]}

    write(files["user"], {"hooks": {"PreToolUse": [group("user.sh")], "Stop": [group("s.sh", "")]}})
    write(files["project"], {"hooks": {"PreToolUse": [group("project.sh")]}})
    write(files["local"], {"hooks": {"PreToolUse": [group("user.sh")]}})  # same group: once
    hooks = load_settings(files["workspace"]).settings.hooks
    assert [g.hooks[0].command for g in hooks["PreToolUse"]] == ["user.sh", "project.sh"]
    assert [g.hooks[0].command for g in hooks["Stop"]] == ["s.sh"]


def test_unknown_keys_are_kept(files: dict[str, Path]) -> None:
    write(files["user"], {"spinnerTipsEnabled": False, "permissions": {"someFuture": 1}})
    write(files["project"], {"statusLine": {"type": "command", "command": "x"}})
    s = load_settings(files["workspace"]).settings
    dumped = s.to_json()
    assert dumped["spinnerTipsEnabled"] is False
    assert dumped["statusLine"] == {"type": "command", "command": "x"}
    assert dumped["permissions"]["someFuture"] == 1


def test_missing_files_are_fine(files: dict[str, Path]) -> None:
    merged = load_settings(files["workspace"])
    assert merged.layers == []
    assert merged.settings.permissions.allow == []
    assert merged.settings.sandbox.auto_allow_bash_if_sandboxed is True


@pytest.mark.parametrize("name", ["user", "project", "local", "managed"])
def test_invalid_json_names_the_file_line_and_column(files: dict[str, Path], name: str) -> None:
    write(files[name], '{\n  "model": "x",\n  "env": {oops}\n}')
    with pytest.raises(SettingsError) as err:
        load_settings(files["workspace"])
    text = str(err.value)
    assert text.startswith(f"{files[name]}: invalid JSON at line 3 column 11")
    assert "\n" not in text


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"permissions": {"allow": "Bash"}}, "`permissions.allow`"),
        ({"permissions": {"deny": ["Read", 3]}}, "`permissions.deny[1]`"),
        ({"permissions": []}, "`permissions`"),
        ({"hooks": {"PreToolUse": {"matcher": "Bash"}}}, "`hooks.PreToolUse`"),
        ({"hooks": {"PreToolUse": [{"matcher": "Bash"}]}}, "`hooks.PreToolUse[0].hooks`"),
        ({"hooks": {"Stop": [{"hooks": [{"command": "x"}]}]}}, "`hooks.Stop[0].hooks[0].type`"),
        (
            {"hooks": {"Stop": [{"hooks": [{"type": "command"}]}]}},
            "`hooks.Stop[0].hooks[0].command`",
        ),
        (
            {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": "5"}]}]}},
            "`hooks.Stop[0].hooks[0].timeout`",
        ),
        (
            {
                "hooks": {
                    "PreToolUse": [
                        {"matcher": "Bash(", "hooks": [{"type": "command", "command": "x"}]}
                    ]
                }
            },
            "`hooks.PreToolUse[0].matcher`: not a valid regular expression",
        ),
        (
            {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": -1}]}]}},
            "`hooks.Stop[0].hooks[0].timeout`: must be a positive number",
        ),
        (
            {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": 0}]}]}},
            "`hooks.Stop[0].hooks[0].timeout`",
        ),
        ({"env": {"A": 1}}, "`env.A`"),
        ({"sandbox": {"enabled": "yes"}}, "`sandbox.enabled`"),
        ({"model": 4}, "`model`"),
        (["not", "an", "object"], "must be a JSON object"),
    ],
)
def test_wrong_shape_names_the_file_and_key(files: dict[str, Path], data: Any, key: str) -> None:
    write(files["project"], data)
    with pytest.raises(SettingsError) as err:
        load_settings(files["workspace"])
    text = str(err.value)
    assert text.startswith(f"{files['project']}: ")
    assert key in text
    assert "\n" not in text


def test_matchers_claude_code_documents_are_accepted(files: dict[str, Path]) -> None:
    groups = [
        {"matcher": m, "hooks": [{"type": "command", "command": "x", "timeout": 0.5}]}
        for m in ("Bash", "Edit|Write", "Notebook.*", "mcp__memory__.*", "^Write$", "*", "")
    ]
    # An event without a matcher ignores what its groups say (as Claude Code does).
    stop = [{"matcher": "(", "hooks": [{"type": "command", "command": "y"}]}]
    write(files["project"], {"hooks": {"PreToolUse": groups, "Stop": stop}})
    assert len(load_settings(files["workspace"]).settings.hooks["PreToolUse"]) == 7


def test_settings_flag_inline_json_and_file(files: dict[str, Path], tmp_path: Path) -> None:
    write(files["local"], {"model": "local", "permissions": {"allow": ["Read"]}})
    inline = load_settings(
        files["workspace"], extra=' {"model": "inline", "permissions": {"allow": ["Edit"]}}'
    )
    assert inline.settings.model == "inline"
    assert sorted(inline.settings.permissions.allow) == ["Edit", "Read"]
    assert inline.layers[0].source == "cliArg" and inline.layers[0].path is None
    flag = write(tmp_path / "flag.json", {"model": "file"})
    from_file = load_settings(files["workspace"], extra=str(flag))
    assert from_file.settings.model == "file"
    assert from_file.layers[0].path == str(flag)


def test_settings_flag_errors_name_it(files: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"^--settings: invalid JSON at line 1 column 2"):
        load_settings(files["workspace"], extra="{model: 1}")
    with pytest.raises(SettingsError, match=r"^--settings: `model`"):
        load_settings(files["workspace"], extra='{"model": 1}')
    missing = tmp_path / "nope.json"
    with pytest.raises(SettingsError, match=f"^{missing}: no such settings file"):
        load_settings(files["workspace"], extra=str(missing))


def test_setting_sources_filter_files_but_not_managed_or_flag(files: dict[str, Path]) -> None:
    for name in ("user", "project", "local", "managed"):
        write(files[name], {"permissions": {"allow": [f"Bash({name})"]}})
    only_project = load_settings(files["workspace"], extra='{"env": {"A": "1"}}', sources="project")
    assert [x.source for x in only_project.layers] == ["managed", "cliArg", "projectSettings"]
    assert sorted(only_project.settings.permissions.allow) == ["Bash(managed)", "Bash(project)"]
    assert only_project.settings.env == {"A": "1"}
    listed = settings_layers(files["workspace"], sources=["user", "local"])
    assert [x.source for x in listed] == ["managed", "localSettings", "userSettings"]
    assert [x.source for x in settings_layers(files["workspace"], sources="")] == ["managed"]
    with pytest.raises(SettingsError, match="--setting-sources: unknown source 'policy'"):
        settings_layers(files["workspace"], sources="user,policy")


def test_merge_ranks_layers_by_source_whatever_their_order() -> None:
    user = SettingsLayer(source="userSettings", path="u", data={"model": "u", "env": {"A": "u"}})
    cli = SettingsLayer(source="cliArg", data={"model": "c"})
    local = SettingsLayer(source="localSettings", path="l", data={"env": {"A": "l", "B": "l"}})
    for order in ([user, cli, local], [local, user, cli]):
        s = merge(order).settings
        assert s.model == "c"
        assert s.env == {"A": "l", "B": "l"}


def test_validate_layer_returns_data_and_keeps_other_hook_types() -> None:
    data = {"hooks": {"Stop": [{"hooks": [{"type": "prompt", "prompt": "check"}]}]}}
    assert validate_layer(data, "x") is data
    with pytest.raises(SettingsError, match=r"^where: `apiKeyHelper`"):
        validate_layer({"apiKeyHelper": ["x"]}, "where")


def test_unreadable_file_names_it(files: dict[str, Path]) -> None:
    files["project"].mkdir()  # a folder where the file should be
    with pytest.raises(SettingsError, match=f"^{files['project']}: cannot read settings: "):
        load_settings(files["workspace"])


def test_workspace_at_home_reads_the_shared_file_once(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURABLE_AGENT_SETTINGS", str(files["project"]))
    write(files["project"], {"permissions": {"allow": ["Read"]}})
    merged = load_settings(files["workspace"])
    assert [x.source for x in merged.layers] == ["projectSettings"]


def test_merged_settings_round_trip_as_a_payload(files: dict[str, Path]) -> None:
    """The merged settings are snapshotted into the prompt's config: JSON there and back."""
    write(files["project"], {
        "permissions": {"deny": ["Read(./secrets/**)"], "defaultMode": "plan", "x": [1]},
        "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "v", "timeout": 5}]}]},
        "sandbox": {"enabled": True, "network": {"allowLocalBinding": True}},
        "spinnerTipsEnabled": False,
    })  # fmt: skip
    merged = load_settings(files["workspace"])
    again = type(merged).model_validate_json(merged.model_dump_json())
    assert again == merged
    assert again.settings.to_json() == merged.settings.to_json()
    assert again.settings.hooks["PreToolUse"][0].hooks[0].timeout == 5


# --------------------------------------------------------------------------- permission context


def _project(data: dict, root: str = "/w") -> SettingsLayer:
    return SettingsLayer(
        source="projectSettings", path=f"{root}/.claude/settings.json", root=root, data=data
    )


@pytest.mark.parametrize(
    "values, rules",
    [
        (["Read,Edit"], ["Read", "Edit"]),
        (["Bash(git log:*) Bash(git diff:*)"], ["Bash(git log:*)", "Bash(git diff:*)"]),
        (["Bash(npm run test:*)", "Edit"], ["Bash(npm run test:*)", "Edit"]),
        (["Bash(echo a,b)"], ["Bash(echo a,b)"]),  # a comma inside a pattern is the pattern's
        ([" , "], []),
        (None, []),
    ],
)
def test_tool_lists_split_like_claude_codes_flags(values, rules):
    assert split_tool_list(values) == rules


def test_permission_context_takes_rules_from_settings_and_flags():
    merged = merge([_project({"permissions": {"deny": ["Bash(rm:*)"], "allow": ["Read"]}})])
    ctx = permission_context(merged, cwd="/w", home="/h", allowed=["Edit"], disallowed=["WebFetch"])
    assert [(r.text, r.source, r.root) for r in ctx.rules.deny] == [
        ("Bash(rm:*)", "projectSettings", "/w"),
        ("WebFetch", "cliArg", "/w"),
    ]
    assert [r.text for r in ctx.rules.allow] == ["Read", "Edit"]
    assert ctx.mode == PermissionMode.DEFAULT


def test_the_flag_mode_beats_the_settings_default_mode():
    merged = merge([_project({"permissions": {"defaultMode": "plan"}})])
    assert permission_context(merged, cwd="/w", home="/h").mode == PermissionMode.PLAN
    flagged = permission_context(merged, cwd="/w", home="/h", mode="acceptEdits")
    assert flagged.mode == PermissionMode.ACCEPT_EDITS


def test_a_bad_rule_or_mode_is_one_line_naming_where():
    merged = merge([_project({"permissions": {"ask": ["bash(rm:*)"]}})])
    with pytest.raises(
        SettingsError, match=r"^/w/\.claude/settings\.json: permissions\.ask: .*'Bash'"
    ):
        permission_context(merged, cwd="/w", home="/h")
    with pytest.raises(SettingsError, match="^--allowedTools: .*empty"):
        permission_context(merge([]), cwd="/w", home="/h", allowed=["Bash()"])
    bad_mode = merge([_project({"permissions": {"defaultMode": "yolo"}})])
    with pytest.raises(SettingsError, match="permissions.defaultMode: unknown permission mode"):
        permission_context(bad_mode, cwd="/w", home="/h")


def test_bypass_can_be_disabled_by_settings():
    merged = merge([_project({"permissions": {"disableBypassPermissionsMode": "disable"}})])
    with pytest.raises(SettingsError, match="disabled"):
        permission_context(merged, cwd="/w", home="/h", mode="bypassPermissions")


def test_additional_directories_are_absolute_and_listed_once():
    merged = merge([_project({"permissions": {"additionalDirectories": ["../lib", "~/notes"]}})])
    ctx = permission_context(merged, cwd="/w/app", home="/h", add_dirs=["/w/lib", "/w/app"])
    assert ctx.additional_directories == ["/w/lib", "/h/notes"]


def test_sandbox_settings_become_the_sandbox_spec(tmp_path):
    from durable_agent.engine.settings import sandbox_spec

    ws = tmp_path / "ws"
    sandbox = {
        "enabled": True,
        "filesystem": {"allowWrite": ["~/.cache/x"], "denyRead": ["./.env"], "denyWrite": ["ci"]},
        "network": {"allowedDomains": ["github.com"]},
    }
    spec = sandbox_spec(load_settings(ws, json.dumps({"sandbox": sandbox})), cwd=str(ws), home="/h")
    assert spec is not None and spec.allow_write == ["/h/.cache/x"]
    assert spec.deny_read == [f"{ws}/.env"] and spec.deny_write == [f"{ws}/ci"]
    assert not spec.allow_network  # a domain list is not "all of it": the network stays off
    sandbox["network"] = {"allowedDomains": ["*"]}
    spec = sandbox_spec(load_settings(ws, json.dumps({"sandbox": sandbox})), cwd=str(ws), home="/h")
    assert spec is not None and spec.allow_network
    off = load_settings(ws, json.dumps({"sandbox": {"enabled": False}}))
    assert sandbox_spec(off, cwd=str(ws), home="/h") is None
    assert sandbox_spec(off, enabled=True, cwd=str(ws), home="/h") is not None  # --sandbox
