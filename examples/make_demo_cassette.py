"""Writes examples/demo.jsonl, the scripted session `durable-agent demo` replays.

Each turn carries expectations on the request it answers, so the demo fails loudly if the
tools did not do what the recording assumes.
"""

from pathlib import Path

from durable_agent.replay.cassette import Expect, Turn, save_turn, text_turn, tool_turn

TEST = "python3 -m unittest -q"


def turns() -> list[Turn]:
    return [
        tool_turn(
            [("toolu_demo_01", "Bash", {"command": TEST, "description": "Run the test suite"})],
            "I'll start by running the tests to see what fails.",
            input_tokens=1450,
            output_tokens=62,
        ),
        tool_turn(
            [
                ("toolu_demo_02", "Glob", {"pattern": "**/*.py"}),
                ("toolu_demo_03", "Read", {"file_path": "stats.py"}),
            ],
            "Two tests of `mean` fail. Let me look at the code.",
            input_tokens=1720,
            output_tokens=88,
        ).model_copy(update={"expect": Expect(last_user_contains=["FAILED", "test_mean"])}),
        tool_turn(
            [
                (
                    "toolu_demo_04",
                    "Edit",
                    {
                        "file_path": "stats.py",
                        "old_string": "sum(values) / (len(values) - 1)",
                        "new_string": "sum(values) / len(values)",
                    },
                )
            ],
            "`mean` divides by `len(values) - 1`; the arithmetic mean divides by `len(values)`.",
            input_tokens=2210,
            output_tokens=120,
        ).model_copy(update={"expect": Expect(last_user_contains=["stats.py", "len(values) - 1"])}),
        tool_turn(
            [("toolu_demo_05", "Bash", {"command": TEST, "description": "Run the tests again"})],
            input_tokens=2390,
            output_tokens=45,
        ).model_copy(update={"expect": Expect(last_user_contains=["has been updated"])}),
        text_turn(
            "Fixed: `mean` in stats.py divided by `len(values) - 1` instead of `len(values)`. "
            "All 3 tests pass now.",
            input_tokens=2480,
            output_tokens=40,
        ).model_copy(update={"expect": Expect(last_user_contains=["OK"])}),
    ]


if __name__ == "__main__":
    target = Path(__file__).with_name("demo.jsonl")
    target.unlink(missing_ok=True)
    for turn in turns():
        save_turn(target, turn)
    print(f"wrote {target}")
