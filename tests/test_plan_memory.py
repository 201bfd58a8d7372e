"""Plan memory: plans of runs that met their goals, reused directly (re-bound, no planner call) or
as the planner's worked example; failures counted against their entries; kept in the run store's
own database; inspected and managed through the API and the CLI."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Literal

import pytest

from planexec import Agent, Approvals, ToolError, UsageError, tool
from planexec.log import ApprovalRequested, ModelCalled, PlanProposed, PlanRecalled, RunFinished
from planexec.memory import LexicalEmbedder, MemoryEntry, PlanMemory
from planexec.models import ModelRequest
from planexec.planner import PolicyName
from planexec.runs import load_run
from planexec.runtime import replay_log
from planexec.store import MemoryStore, SQLiteStore
from planexec.testing import FunctionModel, ScriptedModel
from tests.cli_support import invoke
from tests.support import events_of, tool_step

COUNTS = {"report.txt": 120, "notes.txt": 45, "todo.md": 7}
WRITES: list[tuple[str, str]] = []


@tool
async def word_count(path: str) -> int:
    """Count the words of a file."""
    if path not in COUNTS:
        raise ToolError(f"no file {path}")
    return COUNTS[path]


@tool(side_effect=True)
async def append_line(path: str, line: str) -> str:
    """Append a line to a file."""
    WRITES.append((path, line))
    return f"appended to {path}"


def count_plan(path: str = "report.txt") -> dict[str, Any]:
    return {"reason": "count it", "steps": [tool_step("c", "word_count", {"path": path})]}


def planner_for(plan: dict[str, Any], answer: str) -> ScriptedModel:
    return ScriptedModel([plan, {"answer": answer}])


def no_planner() -> ScriptedModel:
    """A planner that fails the run if it is asked anything."""
    return ScriptedModel([])


def sqlite_store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "runs.db")


async def remembered_count(store: Any, memory: PlanMemory) -> None:
    """Run 'How many words are in report.txt?' once, so that memory holds its plan."""
    agent = Agent(planner_for(count_plan(), "report.txt has 120 words"), tools=[word_count], store=store, memory=memory)
    result = await agent.run("How many words are in report.txt?")
    assert result.stop.kind == "goal_met", result.stop


def planner_calls(result: Any) -> list[ModelCalled]:
    return [e for e in events_of(result, ModelCalled) if e.role == "planner"]


# -- direct reuse ---------------------------------------------------------------------------------


async def test_an_exact_repeat_runs_the_remembered_plan_with_no_planner_call(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    memory = PlanMemory(store)
    await remembered_count(store, memory)
    [entry] = await memory.entries()
    assert entry.answer == "report.txt has {{c}} words"
    assert (entry.uses, entry.failures, entry.tools, entry.planner_calls) == (0, 0, ("word_count",), 2)

    planner = no_planner()
    result = await Agent(planner, tools=[word_count], store=store, memory=memory).run(
        "How many words are in report.txt?"
    )
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "report.txt has 120 words"
    assert planner.calls == []
    assert planner_calls(result) == []
    [recalled] = events_of(result, PlanRecalled)
    assert (recalled.mode, recalled.entry_id, recalled.similarity, recalled.bindings) == ("direct", entry.id, 1.0, ())
    assert [p.author for p in result.plans] == ["memory"]
    [after] = await memory.entries()
    assert (after.uses, after.failures) == (1, 0)


async def test_a_goal_that_differs_in_values_reruns_the_plan_rebound(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    memory = PlanMemory(store)
    await remembered_count(store, memory)

    result = await Agent(no_planner(), tools=[word_count], store=store, memory=memory).run(
        "How many words are in notes.txt?"
    )
    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"c": 45}
    assert result.answer == "notes.txt has 45 words"
    [recalled] = events_of(result, PlanRecalled)
    assert recalled.mode == "direct"
    assert recalled.bindings == (("report.txt", "notes.txt"),)
    assert result.plans[0].step("c").args == {"path": "notes.txt"}


async def test_numbers_are_rebound_as_numbers() -> None:
    @tool
    async def scale(n: int, factor: float) -> float:
        """Scale n."""
        return n * factor

    memory = PlanMemory()
    first = ScriptedModel(
        [{"steps": [tool_step("s", "scale", {"n": 3, "factor": 1.5})]}, {"answer": "3 scaled by 1.5 is 4.5"}]
    )
    assert (await Agent(first, tools=[scale], memory=memory).run("scale 3 by 1.5")).ok
    [entry] = await memory.entries()
    assert entry.answer == "3 scaled by 1.5 is {{s}}"
    result = await Agent(no_planner(), tools=[scale], memory=memory).run("scale 8 by 2.5")
    assert result.ok, result.stop
    assert result.plans[0].step("s").args == {"n": 8, "factor": 2.5}
    assert result.answer == "8 scaled by 2.5 is 20.0"


async def test_an_answer_worked_out_from_the_outputs_is_written_again_by_the_planner() -> None:
    memory = PlanMemory()
    first = planner_for(count_plan(), "report.txt has about 1 hundred words")  # 1 is no output and not in the goal
    assert (await Agent(first, tools=[word_count], memory=memory).run("How many words are in report.txt?")).ok
    [entry] = await memory.entries()
    assert entry.answer is None
    finisher = ScriptedModel([{"answer": "notes.txt has 45 words"}])
    result = await Agent(finisher, tools=[word_count], memory=memory).run("How many words are in notes.txt?")
    assert result.ok
    assert [c.purpose for c in finisher.calls] == ["planner.finish"]  # no plan asked for, only the answer
    assert [p.author for p in result.plans] == ["memory"]


async def test_a_direct_plan_still_passes_the_approval_gates() -> None:
    WRITES.clear()
    memory = PlanMemory()
    plan = {"steps": [tool_step("w", "append_line", {"path": "log.txt", "line": "hello"})]}
    asked: list[str] = []

    async def yes(request: Any) -> bool:
        asked.append(request.subject)
        return True

    async def no(request: Any) -> bool:
        asked.append(request.subject)
        return False

    first = planner_for(plan, "appended hello to log.txt")
    agent = Agent(first, tools=[append_line], memory=memory, approvals=Approvals(approver=yes, steps="all"))
    assert (await agent.run("Append hello to log.txt")).ok
    refuse = Agent(no_planner(), tools=[append_line], memory=memory, approvals=Approvals(approver=no, steps="all"))
    result = await refuse.run("Append bye to log.txt")
    assert result.stop.kind == "rejected", result.stop
    assert WRITES == [("log.txt", "hello")]  # the reused step was asked about, refused, and never made
    assert asked == ["step", "step"]
    [entry] = await memory.entries()
    assert entry.failures == 1
    assert entry.last_failure is not None
    assert "rejected" in entry.last_failure


# -- guided reuse -----------------------------------------------------------------------------------


async def test_other_wording_guides_the_planner_with_the_remembered_plan() -> None:
    memory = PlanMemory()
    await remembered_count(MemoryStore(), memory)
    [first_entry] = await memory.entries()
    planner = planner_for(count_plan("report.txt"), "120 words")
    result = await Agent(planner, tools=[word_count], memory=memory).run(
        "Please tell me how many words are in report.txt?"
    )
    assert result.ok
    [recalled] = events_of(result, PlanRecalled)
    assert recalled.mode == "guided"
    assert recalled.why_not_direct is not None
    assert "which is no value of the plan" in recalled.why_not_direct
    propose = planner.calls[0]
    shown = "\n".join(m.content for m in propose.messages)
    assert "A plan that met a similar goal before" in shown
    assert "How many words are in report.txt?" in shown
    assert '"tool":"word_count"' in shown
    assert "A plan that met" not in "\n".join(m.content for m in planner.calls[1].messages)  # the first request only
    assert [p.author for p in result.plans] == ["planner"]
    entries = {e.id: e for e in await memory.entries()}
    assert entries[first_entry.id].uses == 1  # it helped
    assert len(entries) == 2  # and the new wording is remembered with its own plan


async def test_a_dissimilar_goal_gets_nothing() -> None:
    memory = PlanMemory()
    await remembered_count(MemoryStore(), memory)
    planner = planner_for(count_plan("todo.md"), "7")
    result = await Agent(planner, tools=[word_count], memory=memory).run("Summarise the quarterly sales figures")
    assert result.ok
    assert events_of(result, PlanRecalled) == []


# -- failures, stale plans, missing tools, redaction ---------------------------------------------


async def test_a_reuse_that_fails_is_recorded_and_the_entry_is_no_longer_offered() -> None:
    memory = PlanMemory()
    await remembered_count(MemoryStore(), memory)
    patcher = ScriptedModel([{"reason": "cannot", "give_up": "there is no such file"}])
    result = await Agent(patcher, tools=[word_count], memory=memory).run("How many words are in missing.txt?")
    assert result.stop.kind != "goal_met"
    [entry] = await memory.entries()
    assert entry.failures == 1
    assert entry.last_failure is not None
    assert "no file missing.txt" in entry.last_failure

    planner = planner_for(count_plan("notes.txt"), "45")
    again = await Agent(planner, tools=[word_count], memory=memory).run("How many words are in notes.txt?")
    assert again.ok
    assert events_of(again, PlanRecalled) == []
    assert [c.purpose for c in planner.calls] == ["planner.propose", "planner.finish"]


async def test_a_plan_that_fails_todays_checks_is_not_run_and_counts_as_a_failure() -> None:
    memory = PlanMemory()
    await remembered_count(MemoryStore(), memory)

    @tool(name="word_count")
    async def renamed(file: str) -> int:
        """Count the words of a file (the argument was renamed)."""
        return COUNTS[file]

    planner = planner_for({"steps": [tool_step("c", "word_count", {"file": "notes.txt"})]}, "45")
    result = await Agent(planner, tools=[renamed], memory=memory).run("How many words are in notes.txt?")
    assert result.ok
    [recalled] = events_of(result, PlanRecalled)
    assert recalled.mode == "guided"
    assert recalled.why_not_direct is not None
    assert recalled.why_not_direct.startswith("today's checks refuse it")
    assert [p.author for p in result.plans] == ["planner"]
    entries = await memory.entries()
    old = next(e for e in entries if e.steps[0].args == {"path": "report.txt"})
    assert old.failures == 1


async def test_an_entry_whose_tools_are_gone_is_not_offered() -> None:
    @tool
    async def line_count(path: str) -> int:
        """Count lines."""
        return 3

    memory = PlanMemory()
    await remembered_count(MemoryStore(), memory)
    planner = planner_for({"steps": [tool_step("l", "line_count", {"path": "report.txt"})]}, "3")
    result = await Agent(planner, tools=[line_count], memory=memory).run("How many words are in report.txt?")
    assert result.ok
    assert events_of(result, PlanRecalled) == []


async def test_a_plan_with_secrets_is_kept_redacted_and_only_as_an_example() -> None:
    secret = "sk-" + "a1B2" * 12
    memory2 = PlanMemory()
    ok_plan = {"steps": [tool_step("c", "word_count", {"path": "report.txt"}, description=f"uses {secret}")]}
    assert (await Agent(planner_for(ok_plan, "120"), tools=[word_count], memory=memory2).run("Count report.txt")).ok
    [entry] = await memory2.entries()
    assert secret not in json.dumps(entry.to_record())
    assert entry.direct is False
    planner = planner_for(count_plan(), "120")
    again = await Agent(planner, tools=[word_count], memory=memory2).run("Count report.txt")
    [recalled] = events_of(again, PlanRecalled)
    assert recalled.mode == "guided"
    assert recalled.why_not_direct == "the remembered plan holds values hidden by redaction"


# -- the log: replay, resume ------------------------------------------------------------------------


async def test_runs_that_reused_plans_replay_exactly(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    memory = PlanMemory(store)
    await remembered_count(store, memory)
    direct = await Agent(no_planner(), tools=[word_count], store=store, memory=memory).run(
        "How many words are in notes.txt?"
    )
    guided = await Agent(planner_for(count_plan("todo.md"), "7"), tools=[word_count], store=store, memory=memory).run(
        "Please tell me how many words are in todo.md?"
    )
    assert events_of(guided, PlanRecalled)[0].mode == "guided"
    await memory.forget((await memory.entries())[0].id)  # a replay never asks the memory
    for result in (direct, guided):
        report = await replay_log(await load_run(store, result.run_id))
        assert report.matched, report.divergence


async def test_a_resumed_run_keeps_the_offer_its_log_holds() -> None:
    WRITES.clear()
    store = MemoryStore()
    memory = PlanMemory(store)
    plan = {"steps": [tool_step("w", "append_line", {"path": "log.txt", "line": "hello"})]}
    first = Agent(planner_for(plan, "appended hello"), tools=[append_line], memory=memory)
    assert (await first.run("Append hello to log.txt")).ok  # no approval asked: sensitive steps need none here

    gated = Approvals(deferred=True, steps="all")
    agent = Agent(no_planner(), tools=[append_line], store=store, memory=memory, approvals=gated)
    waiting = await agent.run("Append bye to log.txt", run_id="r2")
    assert waiting.stop.kind == "waiting", waiting.stop
    [asked] = events_of(waiting, ApprovalRequested)
    for entry in await memory.entries():
        await memory.forget(entry.id)  # whatever the memory holds now, the run goes on with its offer
    last = await store.last_seq("r2")
    from planexec.log import ApprovalDecided

    await store.append(
        "r2", [ApprovalDecided(at=1.0, approval_id=asked.approval_id, approved=True, by="cli")], expected_seq=last
    )
    fresh = PlanMemory(store)
    resumed = await Agent(no_planner(), tools=[append_line], store=store, memory=fresh, approvals=gated).resume("r2")
    result = await resumed.result()
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "appended bye"
    assert WRITES == [("log.txt", "hello"), ("log.txt", "bye")]
    assert len(events_of(result, PlanRecalled)) == 1


async def test_a_session_turn_after_the_first_is_only_guided(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    memory = PlanMemory(store)
    await remembered_count(store, memory)
    planner = ScriptedModel(
        [count_plan("notes.txt"), {"answer": "45"}, count_plan("notes.txt"), {"answer": "45 again"}]
    )
    session = Agent(no_planner(), tools=[word_count], store=store, memory=memory).session()
    first = await session.run("How many words are in notes.txt?")
    assert first.ok
    assert events_of(first, PlanRecalled)[0].mode == "direct"
    session_agent = Agent(planner, tools=[word_count], store=store, memory=memory)
    reopened = await session_agent.open_session(session.session_id)
    second = await reopened.run("How many words are in notes.txt?")
    assert second.ok
    [recalled] = events_of(second, PlanRecalled)
    assert recalled.mode == "guided"
    assert recalled.why_not_direct == "a turn of a session depends on the turns before it"


# -- a memory that fails never fails the run -------------------------------------------------------


class _Raising:
    name = "raising"
    kind = "sparse"

    async def embed(self, texts: Any) -> list[Any]:
        raise RuntimeError("the embedder broke")


class _NaN:
    name = "nan"
    kind = "dense"

    async def embed(self, texts: Any) -> list[Any]:
        return [[math.nan, 1.0] for _ in texts]


class _Short:
    name = "short"
    kind = "dense"

    async def embed(self, texts: Any) -> list[Any]:
        return []


@pytest.mark.parametrize("embedder", [_Raising(), _NaN(), _Short()], ids=["raises", "nan", "no_vectors"])
async def test_a_broken_embedder_leaves_runs_to_the_planner(embedder: Any, caplog: pytest.LogCaptureFixture) -> None:
    memory = PlanMemory(embedder=embedder)
    with caplog.at_level(logging.WARNING, logger="planexec.memory"):
        for goal in ("How many words are in report.txt?", "How many words are in report.txt?"):
            planner = planner_for(count_plan(), "120")
            result = await Agent(planner, tools=[word_count], memory=memory).run(goal)
            assert result.stop.kind == "goal_met", result.stop
            assert len(planner.calls) == 2
    assert any("plan memory" in r.getMessage() for r in caplog.records)


async def test_a_memory_database_that_cannot_be_written_leaves_runs_to_the_planner(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    memory = PlanMemory(tmp_path / "dir.db")  # a directory: SQLite cannot open it
    planner = planner_for(count_plan(), "120")
    result = await Agent(planner, tools=[word_count], memory=memory).run("How many words are in report.txt?")
    assert result.stop.kind == "goal_met"
    await memory.close()


async def test_hostile_goals_are_neither_remembered_nor_looked_up() -> None:
    memory = PlanMemory()
    huge = "count " + "x" * 30_000
    planner = planner_for(count_plan(), "120")
    assert (await Agent(planner, tools=[word_count], memory=memory).run(huge)).ok
    assert await memory.entries() == []
    assert await memory.recall(huge, tools=["word_count"]) is None
    assert await memory.recall("", tools=["word_count"]) is None


# -- keeping, inspecting and managing ----------------------------------------------------------------


async def test_entries_outlive_the_process_and_can_be_listed_shown_forgotten_and_exported(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    memory = PlanMemory(store)
    await remembered_count(store, memory)
    await memory.close()
    await store.close()

    other = PlanMemory(SQLiteStore(tmp_path / "runs.db"))  # another process, the same database
    [entry] = await other.entries()
    assert await other.get(entry.id) == entry
    exported = await other.export()
    assert [MemoryEntry.from_record(r) for r in exported] == [entry]
    assert exported[0]["version"] == 1
    recall = await other.recall("How many words are in todo.md?", tools=["word_count"])
    assert recall is not None
    assert recall.mode == "direct"
    assert recall.steps[0].args == {"path": "todo.md"}
    assert await other.forget(entry.id) is True
    assert await other.forget(entry.id) is False
    assert await memory.entries() == []  # the first memory sees the change
    await other.close()


async def test_a_change_made_by_another_memory_is_seen_at_once(tmp_path: Path) -> None:
    a = PlanMemory(tmp_path / "plans.db")
    b = PlanMemory(f"sqlite://{tmp_path / 'plans.db'}")
    assert await b.entries() == []
    await remembered_count(MemoryStore(), a)
    assert len(await b.entries()) == 1
    await a.close()
    await b.close()


def test_bad_settings_are_listed_all_at_once() -> None:
    with pytest.raises(UsageError) as caught:
        PlanMemory(
            "ftp://nowhere",
            embedder="lexical",  # type: ignore[arg-type]
            direct_at=2,
            guided_at=-1,
            max_failures=0,
            candidates=True,
        )
    where = {p.where for p in caught.value.problems}
    assert where == {"where", "embedder", "direct_at", "guided_at", "max_failures", "candidates"}
    with pytest.raises(UsageError) as caught:
        Agent(ScriptedModel([]), memory="memory://")  # type: ignore[arg-type]
    assert [p.where for p in caught.value.problems] == ["memory"]
    with pytest.raises(UsageError):
        LexicalEmbedder(pairs=3)


async def test_entries_by_another_version_or_damaged_are_not_offered(tmp_path: Path) -> None:
    import sqlite3

    memory = PlanMemory(tmp_path / "plans.db")
    await remembered_count(MemoryStore(), memory)
    with sqlite3.connect(tmp_path / "plans.db") as conn:
        conn.execute("INSERT INTO plan_memory VALUES ('x', 1, '{\"version\": 99}'), ('y', 1, '{\"version\": 1}')")
        conn.execute("UPDATE plan_memory_changes SET n = n + 1")
    assert len(await memory.entries()) == 1
    await memory.close()


async def test_similar_goals_are_found_among_many() -> None:
    memory = PlanMemory()
    tools = [f"tool_{i % 50}" for i in range(2_000)]
    for i in range(2_000):
        await memory.remember(
            goal=f"Run job {i} with the {tools[i]} pipeline on dataset d{i * 7}",
            steps=[_step(tools[i], {"job": i})],
            answer=None,
            outputs={},
        )
    recall = await memory.recall("Run job 1234 with the tool_34 pipeline on dataset d8638", tools=set(tools))
    assert recall is not None
    assert recall.entry.goal == "Run job 1234 with the tool_34 pipeline on dataset d8638"
    assert recall.mode == "direct"
    near = await memory.recall("Run job 1234 with the tool_34 pipeline on dataset d9999", tools=set(tools))
    assert near is not None
    assert near.entry.goal.startswith("Run job 1234 ")
    assert near.steps[0].args == {"job": 1234}


def _step(tool_name: str, args: dict[str, Any]) -> Any:
    from planexec.plan import Step

    return Step(id="s", description="run", tool=tool_name, args=args)


async def test_a_step_by_step_run_reuses_a_plan_too() -> None:
    memory = PlanMemory()
    turns = ScriptedModel(
        [
            {
                "thought": "count",
                "confidence": 0.9,
                "stop": False,
                "step": tool_step("c", "word_count", {"path": "report.txt"}),
            },
            {"thought": "done", "stop": True, "answer": "report.txt has 120 words"},
        ]
    )
    from planexec.planner import Planner

    agent = Agent(Planner(model=turns, policy="step"), tools=[word_count], memory=memory)
    assert (await agent.run("How many words are in report.txt?")).ok
    again = Agent(Planner(model=no_planner(), policy="step"), tools=[word_count], memory=memory)
    result = await again.run("How many words are in notes.txt?")
    assert result.ok, result.stop
    assert result.answer == "notes.txt has 45 words"


# -- the CLI -----------------------------------------------------------------------------------------


def test_the_cli_runs_with_memory_and_manages_it(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([count_plan(), {"answer": "report.txt has 120 words"}]))
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    tools = "tests.test_plan_memory:word_count"
    first = invoke(
        [
            "--store",
            db,
            "run",
            "How many words are in report.txt?",
            "--planner",
            f"scripted:{plan}",
            "--tools",
            tools,
            "--memory",
            "--no-live",
            "--json",
        ]
    )
    assert first.exit_code == 0, first.output
    again = invoke(
        [
            "--store",
            db,
            "run",
            "How many words are in notes.txt?",
            "--planner",
            f"scripted:{empty}",
            "--tools",
            tools,
            "--memory",
            "--no-live",
            "--json",
        ]
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["answer"] == "notes.txt has 45 words"

    listed = invoke(["--store", db, "memory", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.stdout)["entries"]
    assert (row["uses"], row["failures"], row["offered"]) == (1, 0, True)
    shown = invoke(["--store", db, "memory", "show", row["id"]])
    assert shown.exit_code == 0
    assert "answer template: report.txt has {{c}} words" in shown.stdout
    exported = invoke(["--store", db, "memory", "export"])
    assert [json.loads(line)["id"] for line in exported.stdout.splitlines()] == [row["id"]]
    gone = invoke(["--store", db, "memory", "forget", row["id"], "nope"])
    assert gone.exit_code == 2
    assert f"forgot {row['id']}" in gone.stdout
    assert "no remembered plan 'nope'" in gone.stderr
    assert json.loads(invoke(["--store", db, "memory", "list", "--json"]).stdout)["entries"] == []
    refused = invoke(["--store", "memory://", "run", "x", "--planner", f"scripted:{empty}", "--memory"])
    assert refused.exit_code == 2
    assert "--memory" in refused.stderr


def _function_planner() -> FunctionModel:
    def reply(request: ModelRequest) -> Any:
        return count_plan() if request.purpose == "planner.propose" else {"answer": "ok"}

    return FunctionModel(reply)


async def test_the_run_started_event_describes_the_memory() -> None:
    memory = PlanMemory(direct_at=0.8, guided_at=0.5, max_failures=2)
    result = await Agent(_function_planner(), tools=[word_count], memory=memory).run("count report.txt")
    assert result.events[0].config["memory"] == {  # type: ignore[union-attr]
        "embedder": "lexical-1",
        "direct_at": 0.8,
        "guided_at": 0.5,
        "max_failures": 2,
    }
    assert isinstance(result.events[-1], RunFinished)
    assert [type(e).__name__ for e in result.events if isinstance(e, PlanProposed)] == ["PlanProposed"]


async def test_entries_live_in_postgresql_beside_the_run_logs() -> None:
    from planexec.store import PostgresStore
    from tests.test_store_support import postgres_schema

    with postgres_schema() as url:
        store = PostgresStore(url)
        memory = PlanMemory(store)
        await remembered_count(store, memory)
        other = PlanMemory(PostgresStore(url))  # another worker, the same database
        [entry] = await other.entries()
        result = await Agent(no_planner(), tools=[word_count], store=store, memory=other).run(
            "How many words are in todo.md?"
        )
        assert result.answer == "todo.md has 7 words"
        assert [e.uses for e in await memory.entries()] == [1]  # the first memory sees the use at once
        assert await memory.forget(entry.id)
        assert await other.entries() == []
        report = await replay_log(await load_run(store, result.run_id))
        assert report.matched, report.divergence
        await memory.close()
        await other.close()
        await store.close()


async def test_a_postgresql_memory_that_cannot_be_reached_leaves_runs_to_the_planner() -> None:
    memory = PlanMemory("postgresql://nobody@127.0.0.1:9/none?connect_timeout=1")
    planner = planner_for(count_plan(), "120")
    result = await Agent(planner, tools=[word_count], memory=memory).run("How many words are in report.txt?")
    assert result.stop.kind == "goal_met"
    await memory.close()


@pytest.mark.parametrize("policy", ["upfront", "step"])
async def test_a_plan_of_several_steps_with_bindings_is_reused_whole(policy: PolicyName) -> None:
    from planexec.planner import Planner
    from tests.support import add

    count = tool_step("c", "word_count", {"path": "report.txt"})
    total = tool_step("t", "add", {"a": "${c}", "b": 10}, "c")
    if policy == "upfront":
        first = ScriptedModel([{"steps": [count, total]}, {"answer": "report.txt: 130 with the 10 extra"}])
    else:
        first = ScriptedModel(
            [
                {"thought": "count", "confidence": 0.9, "stop": False, "step": count},
                {"thought": "add", "confidence": 0.9, "stop": False, "step": total},
                {"thought": "done", "stop": True, "answer": "report.txt: 130 with the 10 extra"},
            ]
        )
    memory = PlanMemory()
    goal = "Count the words of report.txt and add 10"
    assert (await Agent(Planner(model=first, policy=policy), tools=[word_count, add], memory=memory).run(goal)).ok
    [entry] = await memory.entries()
    assert [s.id for s in entry.steps] == ["c", "t"]
    assert entry.answer == "report.txt: {{t}} with the 10 extra"
    planner = Planner(model=no_planner(), policy=policy)
    result = await Agent(planner, tools=[word_count, add], memory=memory).run("Count the words of notes.txt and add 3")
    assert result.ok, result.stop
    assert result.outputs == {"c": 45, "t": 48}
    assert result.plans[0].step("t").args == {"a": "${c}", "b": 3}
    assert result.answer == "notes.txt: 48 with the 3 extra"


class _Letters:
    """A dense embedder: how often each letter occurs (deterministic, no model)."""

    name = "letters"
    kind: Literal["dense"] = "dense"

    async def embed(self, texts: Any) -> list[Any]:
        return [[t.lower().count(c) + 0.01 for c in "abcdefghijklmnopqrstuvwxyz0123456789"] for t in texts]


async def test_a_dense_embedder_finds_its_entries_among_many(tmp_path: Path) -> None:
    memory = PlanMemory(tmp_path / "plans.db", embedder=_Letters())
    for i in range(300):
        await memory.remember(
            goal=f"Archive folder f{i} into box b{i * 3}", steps=[_step("archive", {"n": i})], answer=None, outputs={}
        )
    recall = await memory.recall("Archive folder f17 into box b51", tools=["archive"])
    assert recall is not None
    assert (recall.mode, recall.entry.goal) == ("direct", "Archive folder f17 into box b51")
    other = PlanMemory(tmp_path / "plans.db", embedder=_Letters())  # vectors are stored with the entries
    near = await other.recall("Please archive the folder f17 into the box b51 today", tools=["archive"])
    assert near is not None
    assert near.mode == "guided"
    [entry] = [e for e in await other.entries() if e.id == near.entry.id]
    assert entry.vector is not None
    assert len(entry.vector) == 36
    lexical = PlanMemory(tmp_path / "plans.db")  # the lexical embedder makes its vectors from the goals
    assert (await lexical.recall("Archive folder f17 into box b51", tools=["archive"])) is not None
    await memory.close()
    await other.close()
    await lexical.close()


async def test_a_run_that_handed_off_to_a_workflow_is_reused_with_its_hand_off() -> None:
    from planexec import workflow
    from planexec.testing import handoff_reply

    sent: list[tuple[str, str]] = []

    @workflow
    async def send_count(path: str, to: str) -> str:
        """Count a file's words and send the count.

        Args:
            path: The file.
            to: Who gets it.
        """
        sent.append((path, to))
        return f"sent {COUNTS[path]} words of {path} to {to}"

    memory = PlanMemory()
    first = ScriptedModel([handoff_reply("send_count", {"path": "report.txt", "to": "ann"})])
    agent = Agent(first, workflows=[send_count], memory=memory)
    done = await agent.run("Send the word count of report.txt to ann")
    assert done.ok, done.stop
    assert done.answer == "sent 120 words of report.txt to ann"
    result = await Agent(no_planner(), workflows=[send_count], memory=memory).run(
        "Send the word count of notes.txt to bo"
    )
    assert result.ok, result.stop
    assert result.answer == "sent 45 words of notes.txt to bo"
    assert sent == [("report.txt", "ann"), ("notes.txt", "bo")]
    assert [p.author for p in result.plans] == ["memory"]


async def test_a_number_keeps_the_type_the_plan_gave_it() -> None:
    memory = PlanMemory()
    await memory.remember(
        goal="Fill the tank with 30 gallons", steps=[_step("fill", {"gallon": 30.0})], answer=None, outputs={}
    )
    await memory.remember(goal="Buy 100 shares of AAPL", steps=[_step("buy", {"amount": 100})], answer=None, outputs={})
    fill = await memory.recall("Fill the tank with 12 gallons", tools=["fill"])
    assert fill is not None
    assert fill.mode == "direct"
    assert fill.steps[0].args == {"gallon": 12.0}
    assert isinstance(fill.steps[0].args["gallon"], float)
    buy = await memory.recall("Buy 80 shares of AAPL", tools=["buy"])
    assert buy is not None
    assert buy.steps[0].args == {"amount": 80}
    assert isinstance(buy.steps[0].args["amount"], int)
    half = await memory.recall("Buy 2.5 shares of AAPL", tools=["buy"])
    assert half is not None
    assert half.mode == "guided"
    assert half.why_not_direct == "the plan holds '100' as a whole number, '2.5' is not one"
