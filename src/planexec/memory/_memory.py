"""Plan memory: the plans of successful runs, kept with their goals and offered again.

    memory = PlanMemory(store)                  # beside the run logs, in the store's database
    memory = PlanMemory("sqlite:///plans.db")   # a database of its own
    agent = Agent(planner, tools=..., memory=memory)

A run whose goal is like a remembered one reuses that plan: **direct** — every difference between
the goals is a value of the plan's arguments, so the plan is re-bound to the new values and runs
with no planner call (its answer, too, from the remembered answer's template, when the answer
quotes the outputs); **guided** — the planner plans, shown the remembered plan as a worked example.
The run checks a reused plan against today's tools, judges its steps as any other's, and reports
how the reuse went: an entry whose reuse failed ``max_failures`` times is no longer offered.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from planexec.errors import Problem, UsageError
from planexec.memory._embed import Embedder, LexicalEmbedder
from planexec.memory._entry import MemoryEntry, Recall, tools_of
from planexec.memory._index import GoalIndex, goal_key
from planexec.memory._rebind import answer_template, rebind
from planexec.plan import Step
from planexec.store import PlanMemoryBackend, Redactor, RunStore, plan_memory_at, safe_url

__all__ = ["PlanMemory"]

_DIRECT_TRIES = 3
"""At most this many entries are tried for a direct reuse, per way of finding them."""

MAX_GOAL_CHARS = 20_000
"""Longer goals are neither remembered nor looked up (their similarity says little)."""


_WHERE = "give a run store, a path, sqlite:///path, postgresql://… or memory://"


def _backend_for(where: RunStore | str | os.PathLike[str]) -> tuple[PlanMemoryBackend, Redactor | None]:
    """Where the entries live, and the redactor of the store they live beside (None: no store's)."""
    if isinstance(where, str | os.PathLike):
        try:
            return plan_memory_at(where), None
        except UsageError as e:
            if isinstance(where, str) and any(p.code == "store_url" for p in e.problems):
                raise UsageError(f"cannot keep plan memory in {safe_url(where)!r}: {_WHERE}") from None
            raise
    if isinstance(where, RunStore):
        return where.plan_memory(), where.redactor
    raise UsageError(f"cannot keep plan memory in a {type(where).__name__}: give a run store, a path or a URL")


class PlanMemory:
    """Remembered plans, found again by the similarity of their goals (see the module's docstring).

    ``where``: a run store (its database keeps the entries too), a path or URL of a database of
    their own, or ``memory://``. ``embedder``: how goals become vectors (:class:`LexicalEmbedder`
    by default: no model). ``direct_at``: the share of the goal's words that must be the same in
    both goals (the others being values the plan holds, re-bound) for a direct reuse.
    ``guided_at``: the similarity of the goals (the embedder's) from which an entry is shown to
    the planner as an example, when it cannot be reused directly. ``max_failures``: failed reuses
    after which an entry is no longer offered. ``candidates``: how many nearest entries are
    considered. ``redactor``: what is hidden before an entry is written (the store's by default).
    """

    def __init__(
        self,
        where: RunStore | str | os.PathLike[str] = "memory://",
        *,
        embedder: Embedder | None = None,
        direct_at: float = 0.5,
        guided_at: float = 0.35,
        max_failures: int = 1,
        candidates: int = 8,
        redactor: Redactor | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        problems: list[Problem] = []

        def add(where_: str, message: str) -> None:
            problems.append(Problem(code="plan_memory", where=where_, message=message))

        for name, value in (("direct_at", direct_at), ("guided_at", guided_at)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                add(name, "must be a number from 0 to 1")
        for name, value, least in (("max_failures", max_failures, 1), ("candidates", candidates, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                add(name, f"must be a whole number of at least {least}")
        chosen: Embedder = LexicalEmbedder() if embedder is None else embedder
        if not isinstance(chosen, Embedder) or getattr(chosen, "kind", None) not in ("sparse", "dense"):
            add("embedder", "must be an embedder: a name, a kind ('sparse' or 'dense') and an async embed method")
        if redactor is not None and not isinstance(redactor, Redactor):
            add("redactor", "must be a Redactor")
        backend: PlanMemoryBackend | None = None
        store_redactor: Redactor | None = None
        try:
            backend, store_redactor = _backend_for(where)
        except UsageError as e:
            add("where", str(e))
        if problems:
            raise UsageError("invalid plan memory", problems)
        assert backend is not None
        self._backend = backend
        self.embedder: Embedder = chosen
        self.direct_at = float(direct_at)
        self.guided_at = float(guided_at)
        self.max_failures = max_failures
        self.candidates = candidates
        self.redactor = redactor or store_redactor or Redactor()
        self._clock = clock
        self._entries: dict[str, MemoryEntry] = {}
        self.unreadable: tuple[str, ...] = ()
        """The ids of the stored entries this memory could not read when it last loaded them
        (damaged, or written by a newer planexec): never offered, ``forget`` deletes them."""
        self._index = GoalIndex()
        self._seen: int | None = None
        self._usable_cache: dict[frozenset[str], set[str]] = {}

    def __repr__(self) -> str:
        return f"PlanMemory({self._backend.name}, embedder={self.embedder.name!r})"

    def describe(self) -> dict[str, Any]:
        """How this memory reuses plans, as a run's log records it."""
        return {
            "embedder": self.embedder.name,
            "direct_at": self.direct_at,
            "guided_at": self.guided_at,
            "max_failures": self.max_failures,
        }

    @classmethod
    def from_record(cls, where: RunStore | str | os.PathLike[str], record: object) -> PlanMemory | None:
        """The memory a run's log describes (``describe``), over ``where``: for a run resumed in
        another process. None when the record names an embedder that cannot be made from it
        (a model's: give the memory to the agent yourself) or cannot be read."""
        if not isinstance(record, Mapping) or record.get("embedder") != LexicalEmbedder().name:
            return None
        try:
            return cls(
                where,
                direct_at=record.get("direct_at", 0.5),
                guided_at=record.get("guided_at", 0.35),
                max_failures=record.get("max_failures", 1),
            )
        except UsageError:
            return None

    # -- keeping the index in step with the database --------------------------------------------

    async def _sync(self) -> None:
        version = await self._backend.version()
        if version == self._seen:
            return
        entries: dict[str, MemoryEntry] = {}
        unreadable: list[str] = []
        for entry_id, text in await self._backend.load():
            entry = _read(entry_id, text)
            if entry is None:
                unreadable.append(entry_id)  # written by a newer planexec, or damaged: not offered
            else:
                entries[entry_id] = entry
        index = GoalIndex()
        sparse = self.embedder.kind == "sparse"
        if sparse:
            vectors = await self.embedder.embed([e.goal for e in entries.values()]) if entries else []
            for entry, vector in zip(entries.values(), vectors, strict=True):
                index.add(entry.id, entry.goal, vector)
        else:
            for entry in entries.values():
                if entry.embedder == self.embedder.name and entry.vector is not None:
                    index.add(entry.id, entry.goal, entry.vector)
        self._entries, self._index, self._seen = entries, index, version
        self.unreadable = tuple(sorted(unreadable))
        self._usable_cache.clear()

    async def _embed_one(self, text: str) -> Mapping[str, float] | Sequence[float]:
        vectors = await self.embedder.embed([text])
        if not isinstance(vectors, list) or len(vectors) != 1:
            got = len(vectors) if isinstance(vectors, list) else type(vectors).__name__
            raise UsageError(f"the embedder {self.embedder.name!r} gave {got} vectors for one text")
        return _checked(self.embedder, vectors[0])

    # -- recall -------------------------------------------------------------------------------------

    async def recall(self, goal: str, *, tools: Iterable[str], constraints: Sequence[str] = ()) -> Recall | None:
        """The best reuse of a remembered plan for ``goal`` with ``tools`` at hand, or None.

        Only entries whose tools are all at hand, that were made by this memory's embedder and
        failed fewer than ``max_failures`` reuses are considered, among the ``candidates`` most
        similar. The most similar one that can be re-bound, its goal keeping at least ``direct_at``
        of its words, is reused directly; else the most similar one from ``guided_at`` guides the
        planner.
        """
        if not isinstance(goal, str) or not goal.strip() or len(goal) > MAX_GOAL_CHARS:
            return None
        await self._sync()
        if not self._entries:
            return None
        usable = self._usable(frozenset(tools))
        if not usable:
            return None
        vector = await self._embed_one(goal)
        index = self._index
        wanted = tuple(constraints)
        # Goals that differ from this one only in their values first: a direct reuse needs no search.
        quick = dict.fromkeys(index.exact(goal) & usable, 1.0)
        for entry_id in (index.same_template(goal) & usable) - quick.keys():
            quick[entry_id] = min(1.0, index.similarity(entry_id, vector))
        why: dict[str, str] = {}
        for entry_id, similarity in self._ranked(quick)[:_DIRECT_TRIES]:
            found = self._direct(self._entries[entry_id], similarity, goal, wanted)
            if isinstance(found, Recall):
                return found
            why[entry_id] = found
        nearest = {i: min(1.0, s) for s, i in index.nearest(vector, k=self.candidates, allowed=usable)}
        tries = 0
        best: Recall | None = None
        for entry_id, similarity in self._ranked({**nearest, **quick}):
            if similarity < self.guided_at or tries >= _DIRECT_TRIES:
                break
            entry = self._entries[entry_id]
            reason = why.get(entry_id)
            if reason is None:
                tries += 1
                found = self._direct(entry, similarity, goal, wanted)
                if isinstance(found, Recall):
                    return found
                reason = found
            if best is None:
                best = Recall(
                    entry=entry,
                    similarity=round(similarity, 6),
                    mode="guided",
                    steps=entry.steps,
                    answer=None,
                    why_not_direct=reason,
                )
        return best

    def _ranked(self, found: Mapping[str, float]) -> list[tuple[str, float]]:
        """Most similar first; among equals, the most used, then by id (the same order everywhere)."""
        entries = self._entries
        return sorted(found.items(), key=lambda p: (-p[1], -entries[p[0]].uses, p[0]))

    def _direct(self, entry: MemoryEntry, similarity: float, goal: str, constraints: tuple[str, ...]) -> Recall | str:
        """A direct reuse of ``entry`` for ``goal``, or why there can be none."""
        why = _why_not_direct(entry, constraints)
        if why is not None:
            return why
        bound = rebind(entry.goal, goal, entry.steps, entry.answer)
        if isinstance(bound, str):
            return bound
        if bound.same < self.direct_at:
            return f"the goals have too few words in common ({bound.same:.2f} < {self.direct_at:.2f})"
        return Recall(
            entry=entry,
            similarity=round(similarity, 6),
            mode="direct",
            steps=bound.steps,
            answer=bound.answer,
            bindings=bound.bindings,
        )

    def _usable(self, tools: frozenset[str]) -> set[str]:
        """The entries that may be offered with ``tools`` at hand (kept until the entries change)."""
        cached = self._usable_cache.get(tools)
        if cached is not None:
            return cached
        usable = {
            e.id
            for e in self._entries.values()
            if e.failures < self.max_failures and e.outcome == "goal_met" and tools.issuperset(e.tools)
        }
        if len(self._usable_cache) > 16:
            self._usable_cache.clear()
        self._usable_cache[tools] = usable
        return usable

    # -- remembering and reporting --------------------------------------------------------------

    async def remember(
        self,
        *,
        goal: str,
        steps: Sequence[Step],
        answer: str | None,
        outputs: Mapping[str, Any],
        constraints: Sequence[str] = (),
        run_id: str | None = None,
        cost: float = 0.0,
        planner_calls: int = 0,
        plan_versions: int = 1,
    ) -> MemoryEntry | None:
        """Keep the plan of a run that met its goal: its succeeded ``steps`` (in plan order) and its
        final answer (kept as a template over ``outputs``, the steps' outputs, when it quotes them).
        Values the redactor hides are hidden here too; such a plan is kept only as an example.
        The same goal with the same steps updates its entry. None when there is nothing to keep."""
        if not steps or not isinstance(goal, str) or not goal.strip() or len(goal) > MAX_GOAL_CHARS:
            return None
        template = None if answer is None else answer_template(answer, outputs, goal)
        raw = {
            "goal": goal,
            "constraints": list(constraints),
            "steps": [s.model_dump(mode="json") for s in steps],
            "answer": template,
        }
        hidden = self.redactor.redact(raw)
        direct = hidden == raw
        kept_steps = tuple(Step.model_validate(s) for s in hidden["steps"])
        kept_goal = str(hidden["goal"])
        entry_id = (
            "m-"
            + hashlib.sha256(
                json.dumps([goal_key(kept_goal), hidden["steps"], hidden["constraints"]], sort_keys=True).encode()
            ).hexdigest()[:16]
        )
        await self._sync()
        now = self._clock()
        vector: tuple[float, ...] | None = None
        if self.embedder.kind == "dense":
            vector = tuple(float(v) for v in await self._embed_one(kept_goal))
        entry = MemoryEntry(
            id=entry_id,
            goal=kept_goal,
            constraints=tuple(str(c) for c in hidden["constraints"]),
            steps=kept_steps,
            answer=hidden["answer"],
            tools=tools_of(kept_steps),
            run_id=run_id,
            cost=float(cost),
            planner_calls=int(planner_calls),
            plan_versions=int(plan_versions),
            created_at=now,
            updated_at=now,
            failures=0,
            direct=direct,
            embedder=self.embedder.name,
            vector=vector,
        )

        def kept(old: MemoryEntry | None) -> MemoryEntry:
            return entry if old is None else replace(entry, created_at=old.created_at, uses=old.uses)

        return await self._changed(entry_id, kept)

    async def _changed(
        self, entry_id: str, change: Callable[[MemoryEntry | None], MemoryEntry | None]
    ) -> MemoryEntry | None:
        """Apply ``change`` to the stored entry in one transaction (so that no other writer's
        change is lost), and keep the index in step without reading everything again when nobody
        else wrote in between. The entry written, or None when ``change`` wrote none."""
        written: MemoryEntry | None = None

        def record_change(record: dict[str, Any] | None) -> dict[str, Any] | None:
            nonlocal written
            old = None if record is None else _entry_of(entry_id, record)
            written = change(old)
            return None if written is None else written.to_record()

        before = self._seen
        version = await self._backend.update(entry_id, record_change)
        entry = written
        if entry is None:
            return None
        if before is None or version != before + 1:
            self._seen = None
            return entry
        self._entries[entry.id] = entry
        self._usable_cache.clear()
        if entry.vector is not None:
            self._index.add(entry.id, entry.goal, entry.vector)
        elif self.embedder.kind == "sparse":
            self._index.add(entry.id, entry.goal, await self._embed_one(entry.goal))
        self._seen = version
        return entry

    async def reused(self, entry_id: str, *, ok: bool, why: str | None = None) -> MemoryEntry | None:
        """Report how a reuse of ``entry_id`` went: a success counts a use; a failure counts
        against the entry (``why`` kept, through the redactor), which is no longer offered after
        ``max_failures``."""
        now = self._clock()
        failure = self.redactor.redact_text(why or "the reuse failed")[:500]

        def counted(entry: MemoryEntry | None) -> MemoryEntry | None:
            if entry is None:
                return None
            if ok:
                return replace(entry, uses=entry.uses + 1, updated_at=now)
            return replace(entry, failures=entry.failures + 1, last_failure=failure, updated_at=now)

        return await self._changed(entry_id, counted)

    # -- inspecting and managing ----------------------------------------------------------------

    async def entries(self, *, limit: int | None = None) -> list[MemoryEntry]:
        """Every entry, the most recently updated first."""
        await self._sync()
        ordered = sorted(self._entries.values(), key=lambda e: (-e.updated_at, e.id))
        return ordered if limit is None else ordered[: max(0, limit)]

    async def get(self, entry_id: str) -> MemoryEntry | None:
        await self._sync()
        return self._entries.get(entry_id)

    async def forget(self, entry_id: str) -> bool:
        """Delete an entry; False when there was none."""
        found = await self._backend.delete(entry_id)
        self._seen = None
        return found

    async def export(self) -> list[dict[str, Any]]:
        """Every entry as JSON-ready data (``MemoryEntry.from_record`` reads it back)."""
        return [e.to_record() for e in await self.entries()]

    async def close(self) -> None:
        await self._backend.close()


def _read(entry_id: str, text: str) -> MemoryEntry | None:
    """The entry a stored row holds; None when it cannot be read or is not the entry of its id."""
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return _entry_of(entry_id, record)


def _entry_of(entry_id: str, record: object) -> MemoryEntry | None:
    try:
        entry = MemoryEntry.from_record(record)
    except UsageError:
        return None
    return entry if entry.id == entry_id else None


def _checked(embedder: Embedder, vector: object) -> Mapping[str, float] | Sequence[float]:
    """``vector`` when it is one of the embedder's kind with finite numbers; else UsageError."""
    name = embedder.name
    if embedder.kind == "sparse":
        if not isinstance(vector, Mapping):
            raise UsageError(f"the sparse embedder {name!r} gave a {type(vector).__name__}, not a mapping")
        values: Iterable[object] = vector.values()
        if not all(isinstance(k, str) for k in vector):
            raise UsageError(f"the sparse embedder {name!r} gave a feature that is not a string")
    else:
        if isinstance(vector, str | bytes | Mapping) or not isinstance(vector, Sequence) or not vector:
            raise UsageError(f"the dense embedder {name!r} gave no list of numbers")
        values = vector
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise UsageError(f"the embedder {name!r} gave {v!r}, not a finite number")
    return vector


def _why_not_direct(entry: MemoryEntry, constraints: tuple[str, ...]) -> str | None:
    if not entry.direct:
        return "the remembered plan holds values hidden by redaction"
    if tuple(entry.constraints) != constraints:
        return "the constraints differ"
    return None
