"""Sessions: several goals to one agent, one after another, in one conversation.

    session = agent.session()                    # a new one (its id made by the run context)
    first = await session.run("Move the report to temp")
    second = await session.run("Now sort it")    # its planner sees the first turn
    session = await agent.open_session("s-42")   # one from the store, to go on with

Each turn is a run of its own in the agent's store, linked to the session (``run_started``'s
config holds the session, the turn's number, the record of the turns before it and the turn's
caps), so that it is listed, shown, resumed and replayed as any run is, and the session is the
list of its turns (``RunStore.list_runs(session=...)``). The tools — and whatever state the
objects behind them keep — are the agent's, the same for every turn.

Budgets: ``budget`` caps the whole session (summed over its turns); a turn's own caps
(``run(..., budget=)``, else the agent's) are lowered to what the session still allows. A turn
started when the session has used up a cap stops at once with ``budget_exhausted``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from planexec.errors import Problem, UsageError
from planexec.log import RunResult, RunState
from planexec.runtime._budget import Budget
from planexec.runtime._turns import RECORD_CHARS, SessionRecord, carries_untrusted, describe_turns, turn_budget

if TYPE_CHECKING:
    from planexec.runtime._agent import Agent, Run

__all__ = ["Session"]

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}")


def check_session_id(session_id: object) -> list[Problem]:
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        return [
            Problem(
                code="session",
                where="session_id",
                message="must be 1 to 200 letters, digits, _ . : or -, beginning with a letter or digit",
            )
        ]
    return []


class Session:
    """One conversation with an agent: its turns so far, and the way to run the next."""

    def __init__(
        self,
        agent: Agent,
        session_id: str,
        *,
        budget: Budget | None = None,
        record_chars: int = RECORD_CHARS,
        turns: Sequence[RunResult] = (),
    ) -> None:
        problems = check_session_id(session_id)
        if budget is not None and not isinstance(budget, Budget):
            problems.append(Problem(code="session", where="budget", message="must be a Budget(...) or None"))
        if isinstance(record_chars, bool) or not isinstance(record_chars, int) or record_chars < 0:
            problems.append(Problem(code="session", where="record_chars", message="must be an integer >= 0"))
        if problems:
            raise UsageError("invalid session", problems)
        self.agent = agent
        self.session_id = session_id
        self.budget = budget
        """Caps on the whole session, summed over its turns (None: only each turn's own)."""
        self.record_chars = record_chars
        self._turns: list[RunResult] = list(turns)
        self._states: list[RunState] = [RunState.fold(list(t.events)) for t in turns]
        self._running: Run | None = None
        self.unfinished: str | None = None
        """The run id of a turn left unfinished in the store (set by ``Agent.open_session``)."""

    @property
    def turns(self) -> tuple[RunResult, ...]:
        """The turns that ended (or wait for a human), in order."""
        return tuple(self._turns)

    def record(self) -> str | None:
        """The record of the turns so far that the next turn's planner is shown (bounded)."""
        sealed = self.agent.planner.sealed
        return describe_turns(self._turns, self.record_chars, sealed=sealed) if self.record_chars else None

    async def resume(self) -> RunResult:
        """Go on with the turn left unfinished (see :attr:`unfinished`) to its stop; it is then
        counted among the session's turns."""
        if self.unfinished is None:
            raise UsageError(f"session {self.session_id} has no unfinished turn")
        run = await self.agent.resume(self.unfinished)
        result = await run.result()
        if result.stop.kind != "waiting":
            self.unfinished = None
            self.add(result)
        return result

    def start(
        self,
        goal: str,
        *,
        constraints: Sequence[str] = (),
        budget: Budget | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Run:
        """Start the next turn in the running event loop; its handle at once. (``run`` also keeps
        the result among the turns; after ``start``, hand it to :meth:`add`.) ``metadata`` (JSON
        data) is recorded with the turn, as with ``Agent.start``."""
        if self.unfinished is not None:
            raise UsageError(
                f"session {self.session_id}: its last turn ({self.unfinished}) is unfinished: resume it first"
            )
        if self._running is not None and not self._running.done:
            raise UsageError(f"session {self.session_id}: turn {len(self._turns) + 1} is still running")
        if budget is not None and not isinstance(budget, Budget):
            raise UsageError("invalid turn", [Problem(code="session", where="budget", message="must be a Budget(...)")])
        caps = turn_budget(self.agent.budget, budget, self.budget, self._states)
        earlier = self.record()
        turn = SessionRecord(
            id=self.session_id,
            turn=len(self._turns) + 1,
            earlier=earlier,
            untrusted=carries_untrusted(earlier, self._turns),
            budget=caps,
            session_budget=self.budget,
            record_chars=self.record_chars,
            sealed=self.agent.planner.sealed,
        )
        recorded = {**(metadata or {}), **turn.as_metadata()}
        run = self.agent.start(goal, constraints=constraints, metadata=recorded, budget=caps)
        self._running = run
        return run

    async def run(
        self,
        goal: str,
        *,
        constraints: Sequence[str] = (),
        budget: Budget | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Run the next turn to its stop and return its result (kept among the session's turns)."""
        if self.agent._mcp:
            await self.agent.open()
        handle = self.start(goal, constraints=constraints, budget=budget, metadata=metadata)
        result = await handle.result()
        self.add(result)
        return result

    def add(self, result: RunResult) -> None:
        """Count ``result`` (a turn started with ``start``) among the session's turns."""
        self._running = None
        self._turns.append(result)
        self._states.append(RunState.fold(list(result.events)))
