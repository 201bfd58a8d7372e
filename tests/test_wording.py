"""Counts in what planexec says agree with their nouns: "1 problem", "2 problems", never "problem(s)"."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from planexec import Problem, UsageError
from planexec.errors import UnexpectedModelCall
from planexec.testing import ScriptedModel
from tests.cli_support import invoke

SOURCE = Path(__file__).resolve().parent.parent / "src" / "planexec"


def test_errors_count_their_problems_in_words() -> None:
    problem = Problem(code="c", where="w", message="m")
    assert "bad (1 problem):" in str(UsageError("bad", [problem]))
    assert "bad (2 problems):" in str(UsageError("bad", [problem, problem]))
    model = ScriptedModel(["unused"])
    with pytest.raises(UnexpectedModelCall, match="called 0 times; 1 scripted reply was never used"):
        model.assert_consumed()


def test_the_command_line_counts_in_words() -> None:
    one = invoke(["--store", "memory://", "run", " ", "--planner", "scripted:none.json"])
    assert one.exit_code == 2
    assert "planexec run: 2 problems:" in one.stderr
    gone = invoke(["--store", "memory://", "gc", "--older-than", "0s"])
    assert "removed 0 runs" in gone.stdout


def test_no_message_counts_with_a_bracketed_plural() -> None:
    """'step(s)' is never right: say '1 step' or '2 steps' (planexec._util.plural.counted)."""
    found = []
    for path in SOURCE.rglob("*.py"):
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
        for token in tokens:
            text = re.sub(r"\{[^{}]*\}", "", token.string)  # code inside an f-string is not text
            if token.type == tokenize.STRING and re.search(r"[a-z]\((s|es|ies)\)", text):
                found.append(f"{path.relative_to(SOURCE)}:{token.start[0]}: {token.string[:60]}")
    assert found == []
