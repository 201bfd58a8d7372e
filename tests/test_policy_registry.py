"""The planner policy registry: a policy registered in one place runs end to end, and no policy's
name is spelled out as a string anywhere else in the package."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import planexec
from planexec import Agent, Planner, tool
from planexec.errors import UsageError
from planexec.log import PlanProposed, RunStarted
from planexec.planner import PLANNER_POLICIES, PlanKind, PlannerPolicy, StepByStep, Upfront, planner_policy
from planexec.runtime import replay_log
from planexec.testing import ScriptedModel
from tests.support import add, events_of, tool_step


@tool
async def double(n: int) -> int:
    """Double a number."""
    return 2 * n


class Eager(Upfront):
    """Upfront, with the plan patched after every step that finished, whatever ``replan`` says."""

    name = "eager"
    description = "the whole plan at once, patched after every step"
    plans = "eagerly"

    def after_step(self) -> bool:
        return True


@pytest.fixture
def eager() -> Iterator[type[Eager]]:
    planner_policy(Eager)
    yield Eager
    PLANNER_POLICIES.remove(Eager.name)


async def test_a_registered_policy_runs_end_to_end_and_replays(eager: type[Eager]) -> None:
    model = ScriptedModel(
        [
            {"reason": "start", "steps": [tool_step("a", "add", {"a": 1, "b": 2})]},
            {"reason": "double it next", "steps": [tool_step("b", "double", {"n": "${a}"}, "a")]},
            {"reason": "nothing left", "steps": []},
            {"answer": "6"},
        ]
    )
    planner = Planner(model=model, policy=eager.name)  # replan stays on_failure: the policy patches anyway
    result = await Agent(planner, tools=[add, double]).run("(1+2)*2")

    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"a": 3, "b": 6}
    assert [c.purpose for c in model.calls] == ["planner.propose", "planner.patch", "planner.patch", "planner.finish"]
    assert [e.trigger for e in events_of(result, PlanProposed)] == ["initial", "after_step", "after_step"]
    assert events_of(result, RunStarted)[0].policy == "eager"
    model.assert_consumed()
    report = await replay_log(list(result.events))
    assert report.matched, report.divergence


async def test_a_sealed_planner_follows_a_registered_policy_it_can(eager: type[Eager]) -> None:
    model = ScriptedModel(
        [
            {"steps": [tool_step("a", "add", {"a": 1, "b": 2})], "answer": "{{a}}"},
            {"steps": [], "answer": "sum: {{a}}"},
        ]
    )
    result = await Agent(Planner(model=model, policy=eager.name, sealed=True), tools=[add]).run("1+2")
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "sum: 3"
    assert [c.purpose for c in model.calls] == ["planner.propose", "planner.patch"]  # no planner.finish


def test_the_registry_names_every_policy_in_its_messages(eager: type[Eager]) -> None:
    assert PLANNER_POLICIES.names() == ("upfront", "step", "eager")
    assert PLANNER_POLICIES.get("eager") is eager
    with pytest.raises(UsageError) as caught:
        Planner(model=ScriptedModel([]), policy="sideways")
    assert caught.value.problems[0].message == "'sideways' is not one of upfront, step, eager"
    with pytest.raises(UsageError) as caught:
        Planner(model=ScriptedModel([]), policy=StepByStep.name, sealed=True)
    assert caught.value.problems[0].message == (
        "a sealed planner plans upfront or eagerly: the step-by-step policy chooses "
        "each next step from the results it reads, and a sealed planner reads none "
        "(give policy='upfront' or policy='eager')"
    )


def test_the_built_in_policies_keep_their_messages() -> None:
    with pytest.raises(UsageError) as caught:
        Planner(model=ScriptedModel([]), policy="step", sealed=True)
    assert caught.value.problems[0].message == (
        "a sealed planner plans upfront: the step-by-step policy chooses each next step from the results it "
        "reads, and a sealed planner reads none (give policy='upfront')"
    )


def test_a_policy_is_registered_only_when_it_is_whole() -> None:
    class Nameless(Upfront):
        pass

    class Twin(Upfront):
        name = "upfront"
        description = "another upfront"
        plans = "upfront"

    class Idle(PlannerPolicy):
        name = "idle"
        description = "never plans"
        plans = "never"

        def when_idle(self) -> PlanKind:
            return "finish"

    for policy, message in (
        (Nameless, "give the class its own, as non-empty text"),
        (Twin, "'upfront' is the name of Upfront already"),
        (Idle, "does not say what the loop asks of it: after_step, ask, news_round, round_after"),
    ):
        with pytest.raises(UsageError) as caught:
            planner_policy(policy)
        assert message in [p.message for p in caught.value.problems]
    assert PLANNER_POLICIES.names() == ("upfront", "step")


# -- no policy name spelled out as a string outside its definition -------------------------------

SOURCE = Path(planexec.__file__).parent

SPELLED_ON_PURPOSE = {
    "log/_run_events.py": "RunStarted.policy defaults to 'upfront' for logs written before runs recorded their "
    "policy; the log sits below the planner, and old logs must read the same whatever is registered",
}
"""Modules that still spell a policy's name, and why."""


def _headers(stmt: ast.stmt) -> list[ast.AST]:
    """The parts of a statement that are not statements themselves (a compound statement's body
    is walked statement by statement); none for a docstring."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
        return [*stmt.decorator_list, stmt.args, *([stmt.returns] if stmt.returns else [])]
    if isinstance(stmt, ast.ClassDef):
        return [*stmt.decorator_list, *stmt.bases, *stmt.keywords]
    if isinstance(stmt, ast.If | ast.While):
        return [stmt.test]
    if isinstance(stmt, ast.For | ast.AsyncFor):
        return [stmt.target, stmt.iter]
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return list(stmt.items)
    if isinstance(stmt, ast.Match):
        return [stmt.subject]
    if isinstance(stmt, ast.Try | ast.TryStar):
        return []
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
        return []
    return [stmt]


def _mentions_policy(part: ast.AST, skip: list[ast.Constant]) -> bool:
    for node in ast.walk(part):
        if isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, ast.keyword | ast.arg):
            text = node.arg or ""
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node not in skip:
            text = node.value
        else:
            continue
        if "polic" in text.lower():
            return True
    return False


def _spelled(part: ast.AST, names: set[str]) -> bool:
    """Whether ``part`` spells a policy's name: a name next to something about policies
    (``policy == "step"``, ``policy="upfront"``, ``.get("policy", "upfront")``), two names in
    one tuple, list or set (``Literal[...]``, a ``Choice``), or a text of names only (``"[upfront|step]"``)."""
    constants = [n for n in ast.walk(part) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    named = [c for c in constants if c.value in names]
    if named and _mentions_policy(part, named):
        return True
    for node in ast.walk(part):
        elements = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else []
        if sum(isinstance(e, ast.Constant) and e.value in names for e in elements) >= 2:
            return True
    for text in (str(c.value) for c in constants):
        words = [w for w in re.split(r"[^\w-]+", text) if w]
        if len(words) >= 2 and all(w in names for w in words):
            return True
    return False


def _definitions() -> dict[Path, list[range]]:
    """The lines of each registered policy's own class."""
    found: dict[Path, list[range]] = {}
    for policy in PLANNER_POLICIES:
        lines, first = inspect.getsourcelines(policy)
        found.setdefault(Path(inspect.getsourcefile(policy) or ""), []).append(range(first, first + len(lines)))
    return found


def spellings(root: Path = SOURCE) -> list[str]:
    """Where a module under ``root`` spells a registered policy's name outside its definition."""
    names = set(PLANNER_POLICIES.names())
    definitions = _definitions()
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        own = definitions.get(path, [])
        for stmt in ast.walk(ast.parse(text)):
            if not isinstance(stmt, ast.stmt) or any(stmt.lineno in lines for lines in own):
                continue
            if any(_spelled(part, names) for part in _headers(stmt)):
                found.append(f"{path.relative_to(root).as_posix()}:{stmt.lineno}")
    return found


def test_no_policy_name_is_spelled_outside_its_definition() -> None:
    found = [where for where in spellings() if where.split(":")[0] not in SPELLED_ON_PURPOSE]
    assert found == [], "ask planexec.planner.PLANNER_POLICIES instead of spelling a policy's name"


def test_the_check_finds_the_spellings_it_is_meant_to(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        '"""A module about the upfront policy."""\n'
        'A = planner.policy == "step"\n'
        'B = Planner(model=m, policy="upfront")\n'
        'C = click.Choice(["upfront", "step"])\n'
        'D = click.option("--policy", metavar="[upfront|step]")\n'
        'E = spec.get("policy", "upfront")\n'
        'F = e.subject == "step"\n'  # an approval's subject, not a policy
        "G = Upfront.name\n",
        encoding="utf-8",
    )
    assert spellings(tmp_path) == ["m.py:2", "m.py:3", "m.py:4", "m.py:5", "m.py:6"]


def test_every_exception_is_still_needed() -> None:
    spelled = {where.split(":")[0] for where in spellings()}
    assert set(SPELLED_ON_PURPOSE) - spelled == set(), "drop the modules that no longer spell a name"
