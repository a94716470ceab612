"""Follow docs/tutorial-custom-rule.md step by step, so the tutorial stays true.

The page is executed in order: a ```` ```yaml file=PATH ```` block writes PATH, a ```` ```diff file=PATH ````
block replaces its ``-`` lines with its ``+`` lines in PATH, a ```` ```console ```` block runs each ``$``
command (``exit=N`` gives the expected exit code) and checks that the lines shown follow in the output, and a
```` ```text excerpt=PATH ```` block checks lines of a file. In expected lines ``...`` stands for anything.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import REPO, run_cli

TUTORIAL = REPO / "docs" / "tutorial-custom-rule.md"
_BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)


@dataclass
class Block:
    lang: str
    attrs: dict[str, str]
    body: str
    line: int


def blocks(text: str) -> list[Block]:
    out = []
    for m in _BLOCK.finditer(text):
        attrs = dict(part.split("=", 1) for part in m.group(2).split() if "=" in part)
        out.append(Block(m.group(1), attrs, m.group(3), text[: m.start()].count("\n") + 1))
    return out


def line_pattern(expected: str) -> re.Pattern[str]:
    """An expected line as a regex: ``...`` matches anything, runs of blanks match any blanks."""
    parts = [r"\s+".join(re.escape(word) for word in piece.split()) for piece in expected.split("...")]
    return re.compile(".*?".join(parts))


def assert_lines_follow(expected: str, actual: str, where: str) -> None:
    lines = actual.splitlines()
    cursor = 0
    for want in expected.splitlines():
        want = want.strip()
        if not want or want == "...":
            continue
        pattern = line_pattern(want)
        for i in range(cursor, len(lines)):
            if pattern.search(lines[i]):
                cursor = i + 1
                break
        else:
            raise AssertionError(f"{where}: expected a line matching\n  {want}\nafter line {cursor} of:\n{actual}")


@dataclass
class Session:
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)

    def write(self, block: Block) -> None:
        path = self.cwd / block.attrs["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.body)

    def patch(self, block: Block) -> None:
        path = self.cwd / block.attrs["file"]
        old = "".join(line[1:] + "\n" for line in block.body.splitlines() if line.startswith("-"))
        new = "".join(line[1:] + "\n" for line in block.body.splitlines() if line.startswith("+"))
        text = path.read_text()
        assert text.count(old) == 1, f"tutorial line {block.line}: the diff's old lines are not in {path} once"
        path.write_text(text.replace(old, new))

    def run(self, block: Block) -> None:
        expected_code = int(block.attrs.get("exit", "0"))
        commands: list[tuple[str, list[str]]] = []
        for line in block.body.splitlines():
            if line.startswith("$ "):
                commands.append((line[2:], []))
            elif commands:
                commands[-1][1].append(line)
        assert commands, f"tutorial line {block.line}: a console block without commands"
        for command, output in commands:
            words = shlex.split(command)
            if words[0] == "export":
                name, _, value = words[1].partition("=")
                self.env[name] = value
                continue
            assert words[0] == "advisor", f"tutorial line {block.line}: only advisor commands can be checked"
            result = run_cli(*words[1:], cwd=self.cwd, env=self.env, timeout=600)
            where = f"tutorial line {block.line}: `{command}`"
            assert result.code == expected_code, f"{where} exited {result.code}, not {expected_code}:\n{result.output}"
            assert_lines_follow("\n".join(output), result.output, where)

    def excerpt(self, block: Block) -> None:
        path = self.cwd / block.attrs["excerpt"]
        assert_lines_follow(block.body, path.read_text(), f"tutorial line {block.line}: {path.name}")


def test_the_tutorial_has_every_kind_of_step() -> None:
    kinds = {(b.lang, tuple(sorted(b.attrs))) for b in blocks(TUTORIAL.read_text())}
    assert ("yaml", ("file",)) in kinds and ("diff", ("file",)) in kinds
    assert ("console", ()) in kinds and ("console", ("exit",)) in kinds and ("text", ("excerpt",)) in kinds


@pytest.mark.slow
def test_follow_the_tutorial(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    session = Session(tmp_path, {"ADVISOR_RULES": ""})   # the reader starts without user rules
    for block in blocks(TUTORIAL.read_text()):
        if block.lang == "yaml" and "file" in block.attrs:
            session.write(block)
        elif block.lang == "diff":
            session.patch(block)
        elif block.lang == "console":
            session.run(block)
        elif "excerpt" in block.attrs:
            session.excerpt(block)
    # the tutorial's end state: the rule fired with the new severity, and CPU001 was switched off
    diagnoses = (tmp_path / "runs" / "slow_optimizer" / "diagnoses.json").read_text()
    assert '"rule_id": "TEAM001"' in diagnoses and '"severity": "medium"' in diagnoses
    assert '"CPU001"' not in diagnoses


def test_matching_rules_of_the_harness() -> None:
    assert_lines_follow("a ... c\n...\nlast", "x a b c y\nmiddle\nthe last line", "self-test")
    with pytest.raises(AssertionError):
        assert_lines_follow("second\nfirst", "first\nsecond", "self-test")
    assert line_pattern("ID   NAME").search("ID       NAME")
