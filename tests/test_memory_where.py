"""Where a PlanMemory keeps its entries: the store it is given, or a store URL or path read by the
store's own parser (``planexec.store.plan_memory_at``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planexec import UsageError
from planexec.memory import PlanMemory
from planexec.plan import Step
from planexec.store import MemoryStore, Redactor, SQLiteStore


def _where_problem(where: object) -> str:
    with pytest.raises(UsageError) as caught:
        PlanMemory(where)  # type: ignore[arg-type]
    [problem] = caught.value.problems
    assert problem.where == "where"
    return problem.message


@pytest.mark.parametrize("url", ["ftp://nowhere", "sqlite://host/plans.db", "mysql://me:hunter22@db/plans"])
def test_a_url_no_store_takes_is_refused_with_the_forms_that_work(url: str) -> None:
    message = _where_problem(url)
    assert message.startswith("cannot keep plan memory in '")
    assert message.endswith("give a run store, a path, sqlite:///path, postgresql://… or memory://")
    assert "hunter22" not in message


def test_something_that_is_no_store_is_refused() -> None:
    assert _where_problem(3) == "cannot keep plan memory in a int: give a run store, a path or a URL"


async def test_a_store_keeps_the_entries_with_its_redactor(tmp_path: Path) -> None:
    redactor = Redactor(pii=True)
    store = SQLiteStore(tmp_path / "runs.db", redactor=redactor)
    memory = PlanMemory(store)
    assert memory.redactor is redactor
    assert "SQLite file" in repr(memory)
    assert PlanMemory(store, redactor=Redactor()).redactor is not redactor  # the memory's own wins
    await memory.close()
    await store.close()


@pytest.mark.parametrize("where", ["memory://", "memory:", "MEMORY://"])
async def test_memory_urls_keep_entries_in_this_process(where: str) -> None:
    memory = PlanMemory(where)
    assert "in this process" in repr(memory)
    assert await memory.entries() == []
    await memory.close()


STEP = Step(id="c", description="count the words", tool="word_count", args={"path": "report.txt"})


async def test_a_path_a_url_and_the_store_of_one_file_share_the_entries(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    memories = [PlanMemory(store), PlanMemory(path), PlanMemory(f"sqlite://{path}"), PlanMemory(str(path))]
    assert {repr(m) for m in memories} == {
        f"PlanMemory(plan memory in SQLite file {str(path)!r}, embedder='lexical-1')"
    }
    assert await memories[0].remember(goal="How many words are in report.txt?", steps=[STEP], answer=None, outputs={})
    for memory in memories:
        assert [e.steps for e in await memory.entries()] == [(STEP,)]
        await memory.close()
    await store.close()


async def test_a_store_in_memory_gives_each_memory_its_own_entries() -> None:
    store = MemoryStore()
    a, b = PlanMemory(store), PlanMemory(store)
    assert await a.remember(goal="How many words are in report.txt?", steps=[STEP], answer=None, outputs={})
    assert await b.entries() == []
    await a.close()
    await b.close()
