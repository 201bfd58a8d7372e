"""Plan memory under attack: goals crafted so that a re-bound value lands where it should not,
poisoned memory databases, memories written at once by several runs, and secrets in what a failed
reuse leaves behind. Each test pins a hole that was found and closed."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from planexec import Agent, ToolError, tool
from planexec.memory import PlanMemory
from planexec.plan import Step
from planexec.runs import load_run
from planexec.runtime import replay_log
from planexec.store import SQLiteStore
from planexec.testing import ScriptedModel
from tests.cli_support import invoke
from tests.support import tool_step

LINES: list[tuple[str, str]] = []


@tool
async def word_count(path: str) -> int:
    """Count the words of a file."""
    return {"report.txt": 120, "notes.txt": 45}.get(path, 7)


@tool(side_effect=True)
async def append_line(path: str, line: str) -> str:
    """Append a line to a file."""
    LINES.append((path, line))
    return f"appended to {path}"


@tool
async def shell(cmd: str) -> str:
    """Run a command."""
    return cmd


def step(args: dict[str, Any], *, step_id: str = "s", tool_name: str = "shell", description: str = "run") -> Step:
    return Step(id=step_id, description=description, tool=tool_name, args=args)


async def rebound(old_goal: str, args: dict[str, Any], new_goal: str, **answer: Any) -> Any:
    """What a memory that remembered ``args`` for ``old_goal`` offers for ``new_goal``."""
    memory = PlanMemory()
    await memory.remember(
        goal=old_goal, steps=[step(args)], answer=answer.get("answer"), outputs=answer.get("outputs", {})
    )
    return await memory.recall(new_goal, tools=["shell"])


# -- re-binding: where a new value may land ------------------------------------------------------------


async def test_a_new_value_is_never_replaced_again_by_a_later_difference() -> None:
    recall = await rebound("Copy x.txt to y.txt", {"cmd": "cp x.txt y.txt"}, "Copy y.txt to z.txt")
    assert recall is not None
    assert recall.mode == "direct"
    assert recall.steps[0].args == {"cmd": "cp y.txt z.txt"}  # not "cp z.txt z.txt"


async def test_one_value_that_would_become_two_is_not_reused_directly() -> None:
    recall = await rebound("Copy a.txt to a.txt", {"cmd": "cp a.txt a.txt"}, "Copy b.txt to c.txt")
    assert recall is None or recall.mode == "guided"


async def test_a_value_that_differs_only_in_case_is_rebound_too() -> None:
    for new_goal, value in (("Delete REPORT.TXT", "REPORT.TXT"), ("Delete rep\u212aort.txt", "rep\u212aort.txt")):
        recall = await rebound("Delete report.txt", {"cmd": "rm report.txt"}, new_goal)
        assert recall is not None
        assert recall.mode == "direct"
        assert recall.steps[0].args == {"cmd": f"rm {value}"}
    same = await rebound("delete report.txt", {"cmd": "rm report.txt"}, "Delete report.txt")  # wording only
    assert same is not None
    assert same.mode == "direct"
    assert same.steps[0].args == {"cmd": "rm report.txt"}


async def test_values_are_replaced_as_whole_words_of_the_goal_only() -> None:
    recall = await rebound("Set the timeout to 5", {"cmd": "set timeout 5 ratio 1.5 file my-5"}, "Set the timeout to 7")
    assert recall is not None
    assert recall.steps[0].args == {"cmd": "set timeout 7 ratio 1.5 file my-5"}
    path = await rebound("Write a.txt", {"cmd": "write a.txt my-a.txt a.txt.bak"}, "Write b.txt")
    assert path is not None
    assert path.steps[0].args == {"cmd": "write b.txt my-a.txt a.txt.bak"}


async def test_a_value_only_a_description_holds_is_no_value_of_the_plan() -> None:
    memory = PlanMemory()
    plan = [Step(id="s", description="send report.txt to bob", tool="shell", args={"cmd": "mail bob@x.com"})]
    await memory.remember(goal="Send report.txt to bob", steps=plan, answer=None, outputs={})
    recall = await memory.recall("Send report.txt to eve", tools=["shell"])
    assert recall is None or recall.mode == "guided"  # it ran `mail bob@x.com` for eve
    cursor = PlanMemory()
    moves = [Step(id="m", description="move by -5", tool="shell", args={"dx": -5})]
    await cursor.remember(goal="Move the cursor by -5", steps=moves, answer=None, outputs={})
    moved = await cursor.recall("Move the cursor by -7", tools=["shell"])
    assert moved is None or moved.mode == "guided"  # it moved by -5
    signed = await rebound("Move the cursor by -5", {"dx": -5, "note": "by -5"}, "Move the cursor by -7")
    assert signed is None or signed.mode == "guided"  # it moved by -5, noted "-7"


async def test_regex_syntax_and_backslashes_in_values_are_plain_text() -> None:
    recall = await rebound("Greet a.b now", {"cmd": "echo a.b"}, r"Greet \g<0> now")
    assert recall is not None
    assert recall.mode == "direct"
    assert recall.steps[0].args == {"cmd": r"echo \g<0>"}
    dots = await rebound("Greet a.b", {"cmd": "echo a.b axb"}, "Greet c.d")
    assert dots is not None
    assert dots.steps[0].args == {"cmd": "echo c.d axb"}


async def test_a_goal_cannot_bind_another_steps_output_into_an_argument() -> None:
    LINES.clear()
    memory = PlanMemory()
    plan = {
        "steps": [
            tool_step("c", "word_count", {"path": "report.txt"}),
            tool_step("w", "append_line", {"path": "log.txt", "line": "note hello"}, "c"),
        ]
    }
    first = ScriptedModel([plan, {"answer": "noted hello"}])
    assert (await Agent(first, tools=[word_count, append_line], memory=memory).run("Note hello in log.txt")).ok
    result = await Agent(ScriptedModel([]), tools=[word_count, append_line], memory=memory).run("Note ${c} in log.txt")
    assert result.ok, result.stop
    assert [p.author for p in result.plans] == ["memory"]
    assert LINES[-1] == ("log.txt", "note ${c}")  # the text the goal gave, not step c's output (120)


async def test_a_value_next_to_a_dollar_sign_cannot_become_a_binding() -> None:
    recall = await rebound("Pay $5 now", {"cmd": "pay $5"}, "Pay ${s} now")
    assert recall is None or recall.mode == "guided"
    braces = await rebound(
        "Count report.txt", {"cmd": "wc report.txt"}, "Count {s}", answer="{report.txt}: 120", outputs={"s": 120}
    )
    assert braces is not None
    assert braces.mode == "direct"
    assert braces.answer is None  # "{" + "{s}" + "}" would read as a placeholder: the planner answers


async def test_a_goal_cannot_write_a_placeholder_into_the_answer() -> None:
    recall = await rebound(
        "Count the words of report.txt",
        {"cmd": "wc report.txt"},
        "Count the words of {{s}}",
        answer="report.txt has 120 words",
        outputs={"s": 120},
    )
    assert recall is not None
    assert recall.mode == "direct"
    assert recall.answer is not None
    assert recall.answer.count("{{s}}") == 1


async def test_a_value_that_is_also_a_step_id_leaves_the_answer_placeholders_alone() -> None:
    recall = await rebound(
        "Count the words of s", {"cmd": "wc s"}, "Count the words of t", answer="s has 120 words", outputs={"s": 120}
    )
    assert recall is not None
    assert recall.mode == "direct"
    assert recall.answer == "t has {{s}} words"


async def test_an_output_that_is_also_a_step_id_keeps_the_answer_template_whole() -> None:
    memory = PlanMemory()
    steps = [step({"cmd": "a"}, step_id="total"), step({"cmd": "b"}, step_id="name")]
    entry = await memory.remember(
        goal="Show the total of a.csv",
        steps=steps,
        answer="total: 1234567",
        outputs={"total": 1234567, "name": "total"},
    )
    assert entry is not None
    assert entry.answer == "{{name}}: {{total}}"  # not "{{name}}: {{{{name}}}}"


@tool
async def counted(path: str) -> int:
    """Count the words of a file."""
    return {"report.txt": 120, "notes.txt": 45}[path]


async def test_an_answer_that_judges_the_outputs_is_written_again_by_the_planner() -> None:
    for answer in ("Yes, report.txt has 120 words", "Yes", "report.txt isn't short: 120 words"):
        memory = PlanMemory()
        plan = {"steps": [tool_step("c", "counted", {"path": "report.txt"})]}
        first = ScriptedModel([plan, {"answer": answer}])
        goal = "Does report.txt have more than 100 words?"
        assert (await Agent(first, tools=[counted], memory=memory).run(goal)).ok
        [entry] = await memory.entries()
        assert entry.answer is None, answer
        finisher = ScriptedModel([{"answer": "No, notes.txt has 45 words"}])
        result = await Agent(finisher, tools=[counted], memory=memory).run("Does notes.txt have more than 100 words?")
        assert result.answer == "No, notes.txt has 45 words"  # not "Yes, notes.txt has 45 words"
        assert [c.purpose for c in finisher.calls] == ["planner.finish"]


async def test_big_outputs_are_made_into_an_answer_template_quickly() -> None:
    memory = PlanMemory()
    outputs = {f"s{i}": "word " * 200_000 + str(i) for i in range(10)}
    steps = [step({"cmd": str(i)}, step_id=f"s{i}") for i in range(10)]
    started = time.perf_counter()
    entry = await memory.remember(goal="Fetch the 10 pages", steps=steps, answer="fetched 10 pages", outputs=outputs)
    quoting = await memory.remember(goal="Show page 1", steps=steps, answer=f"page: {outputs['s1']}", outputs=outputs)
    assert time.perf_counter() - started < 5  # minutes before: every output became a regex
    assert entry is not None
    assert entry.answer == "fetched 10 pages"
    assert quoting is not None
    assert quoting.answer is None  # an answer that long is written again by the planner


async def test_a_long_goal_of_values_is_compared_quickly_and_not_reused_directly() -> None:
    memory = PlanMemory()
    old = " ".join(f"a v{i}.x" for i in range(2_000))[:19_000]
    new = " ".join(f"a w{i}.x" for i in range(2_000))[:19_000]
    await memory.remember(goal=old, steps=[step({"cmd": old})], answer=None, outputs={})
    started = time.perf_counter()
    recall = await memory.recall(new, tools=["shell"])
    assert time.perf_counter() - started < 5  # minutes before: the word-by-word alignment was cubic
    assert recall is None or recall.mode == "guided"
    one_value = old.replace("v1000.x", "w1000.x")  # a long goal with one value changed is still reused
    found = await memory.recall(one_value, tools=["shell"])
    assert found is not None
    assert found.mode == "direct"
    assert found.bindings == (("v1000.x", "w1000.x"),)


async def test_runs_that_reused_rebound_plans_replay_exactly(tmp_path: Path) -> None:
    LINES.clear()
    store = SQLiteStore(tmp_path / "runs.db")
    memory = PlanMemory(store)
    plan = {"steps": [tool_step("w", "append_line", {"path": "x.txt", "line": "copy x.txt y.txt"})]}
    first = ScriptedModel([plan, {"answer": "appended to x.txt"}])
    assert (await Agent(first, tools=[append_line], store=store, memory=memory).run("Copy x.txt to y.txt")).ok
    result = await Agent(ScriptedModel([]), tools=[append_line], store=store, memory=memory).run("Copy y.txt to ${w}")
    assert result.ok, result.stop
    assert LINES[-1] == ("y.txt", "copy y.txt ${w}")
    report = await replay_log(await load_run(store, result.run_id))
    assert report.matched, report.divergence


# -- a poisoned memory database ---------------------------------------------------------------------


async def _poisoned(path: Path) -> str:
    """A memory file with one good entry and rows that cannot be read; the good entry's id."""
    memory = PlanMemory(path)
    entry = await memory.remember(
        goal="How many words are in report.txt?",
        steps=[step({"path": "report.txt"}, step_id="c", tool_name="word_count")],
        answer="report.txt has 120 words",
        outputs={"c": 120},
    )
    await memory.close()
    assert entry is not None
    good = entry.to_record()
    bad = {
        "not-json": "{not json",
        "null": "null",
        "overflow": json.dumps(good | {"id": "overflow", "uses": 1}).replace('"uses": 1', '"uses": 1e400'),
        "nan-time": json.dumps(good | {"id": "nan-time", "updated_at": float("nan")}),
        "huge-time": json.dumps(good | {"id": "huge-time", "updated_at": 1e300}),
        "number-answer": json.dumps(
            good | {"id": "number-answer", "goal": "How many words are in a.txt?", "answer": 5}
        ),
        "deep": '{"version": 1, "id": "deep", "goal": "g", "steps": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "not-its-id": json.dumps(good | {"id": entry.id}),
        "bad-step": json.dumps(good | {"id": "bad-step", "steps": [{"id": "1 bad"}]}),
        "other-tools": json.dumps(
            good
            | {"id": "other-tools", "goal": "How many words are in b.txt?", "tools": ["word_count"]}
            | {"steps": [{"id": "x", "description": "d", "tool": "append_line", "args": {"path": "b", "line": "l"}}]}
        ),
    }
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO plan_memory VALUES (?, 1, ?)", list(bad.items()))
        conn.execute("UPDATE plan_memory_changes SET n = n + 1")
    conn.close()
    return entry.id


async def test_a_poisoned_database_leaves_its_good_entries_usable(tmp_path: Path) -> None:
    good = await _poisoned(tmp_path / "plans.db")
    memory = PlanMemory(tmp_path / "plans.db")
    entries = await memory.entries()
    assert {e.id for e in entries} == {good, "other-tools"}
    assert set(memory.unreadable) == {
        "not-json",
        "null",
        "overflow",
        "nan-time",
        "huge-time",
        "number-answer",
        "deep",
        "not-its-id",
        "bad-step",
    }
    other = next(e for e in entries if e.id == "other-tools")
    assert other.tools == ("append_line",)  # what its steps call, whatever the row claims
    found = await memory.recall("How many words are in b.txt?", tools=["word_count"])
    assert found is not None
    assert found.entry.id == good
    result = await Agent(ScriptedModel([]), tools=[word_count], memory=memory).run("How many words are in notes.txt?")
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "notes.txt has 45 words"
    assert await memory.forget("not-its-id")  # an unreadable row can still be deleted by its id
    assert len(await memory.entries()) == 2
    assert "not-its-id" not in memory.unreadable
    await memory.close()


def test_the_cli_lists_shows_and_exports_a_poisoned_database(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    SQLiteStore(db)  # the run store's file, as `--store` names it
    good = asyncio.run(_poisoned(db))
    store = f"sqlite:///{db}"
    listed = invoke(["--store", store, "memory", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    data = json.loads(listed.stdout)
    assert good in [row["id"] for row in data["entries"]]
    assert "not-json" in data["unreadable"]
    table = invoke(["--store", store, "memory", "list"])
    assert table.exit_code == 0, table.output
    assert "could not be read" in table.output
    shown = invoke(["--store", store, "memory", "show", good])
    assert shown.exit_code == 0, shown.output
    missing = invoke(["--store", store, "memory", "show", "not-json"])
    assert missing.exit_code == 2
    assert "cannot be read" in missing.stderr
    exported = invoke(["--store", store, "memory", "export"])
    assert exported.exit_code == 0, exported.output
    assert good in [json.loads(line)["id"] for line in exported.stdout.splitlines()]
    for weird in ("", "[bold]x[/bold]", "\x1b[31mred", "x" * 10_000):
        odd = invoke(["--store", store, "memory", "show", weird])
        assert odd.exit_code == 2, odd.output
    gone = invoke(["--store", store, "memory", "forget", "not-json"])
    assert gone.exit_code == 0, gone.output


# -- several runs at once on one database -------------------------------------------------------------


async def test_reuses_reported_at_once_by_several_memories_are_all_counted(tmp_path: Path) -> None:
    a, b = PlanMemory(tmp_path / "plans.db"), PlanMemory(tmp_path / "plans.db")
    entry = await a.remember(goal="Run it", steps=[step({"cmd": "x"})], answer=None, outputs={})
    assert entry is not None
    await asyncio.gather(*(m.reused(entry.id, ok=True) for m in (a, b) for _ in range(10)))
    await asyncio.gather(*(m.reused(entry.id, ok=False, why="no") for m in (a, b)))
    after = await b.get(entry.id)
    assert after is not None
    assert (after.uses, after.failures) == (20, 2)
    again = await a.remember(goal="Run it", steps=[step({"cmd": "x"})], answer=None, outputs={})
    assert again is not None
    assert again.uses == 20  # remembered again: its uses are kept
    await a.close()
    await b.close()


async def test_reuses_reported_at_once_in_postgresql_are_all_counted() -> None:
    from planexec.store import PostgresStore
    from tests.test_store_support import postgres_schema

    with postgres_schema() as url:
        a, b = PlanMemory(PostgresStore(url)), PlanMemory(url)
        entry = await a.remember(goal="Run it", steps=[step({"cmd": "x"})], answer=None, outputs={})
        assert entry is not None
        await asyncio.gather(*(m.reused(entry.id, ok=True) for m in (a, b) for _ in range(10)))
        after = await b.get(entry.id)
        assert after is not None
        assert after.uses == 20
        assert await b.reused("nothing-here", ok=True) is None
        await a.close()
        await b.close()


# -- redaction -------------------------------------------------------------------------------------------


SECRET = "sk-" + "a1B2" * 12


@tool
async def fetch(url: str) -> str:
    """Fetch a page."""
    if "bad" in url:
        raise ToolError(f"401 for token {SECRET}")
    return "ok"


async def test_a_failed_reuse_keeps_no_secret_in_the_memory(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    memory = PlanMemory(store)
    plan = {"steps": [tool_step("f", "fetch", {"url": "good.com"})]}
    first = ScriptedModel([plan, {"answer": "fetched good.com"}])
    assert (await Agent(first, tools=[fetch], store=store, memory=memory).run("Fetch good.com")).ok
    gives_up = ScriptedModel([{"reason": "no", "give_up": "the page cannot be fetched"}])
    failed = await Agent(gives_up, tools=[fetch], store=store, memory=memory).run("Fetch bad.com")
    assert failed.stop.kind != "goal_met"
    [entry] = await memory.entries()
    assert entry.failures == 1
    assert entry.last_failure is not None
    assert "401 for token" in entry.last_failure
    await memory.close()
    await store.close()
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        rows = [r[0] for r in conn.execute("SELECT record FROM plan_memory")]
    conn.close()
    assert rows
    assert not any(SECRET in row for row in rows)


async def test_secrets_in_the_goal_and_answer_never_reach_the_memory_tables(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    memory = PlanMemory(store)
    plan = {"steps": [tool_step("f", "fetch", {"url": f"good.com?key={SECRET}"})]}
    first = ScriptedModel([plan, {"answer": f"fetched with {SECRET}"}])
    assert (await Agent(first, tools=[fetch], store=store, memory=memory).run(f"Fetch good.com with {SECRET}")).ok
    [entry] = await memory.entries()
    assert entry.direct is False
    await memory.close()
    await store.close()
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        rows = [r[0] for r in conn.execute("SELECT record FROM plan_memory")]
    conn.close()
    assert rows
    assert not any(SECRET in row for row in rows)
