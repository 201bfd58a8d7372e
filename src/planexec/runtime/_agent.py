"""The Python API: an Agent runs goals (each a :class:`Run`, which streams its events and yields its result)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from planexec._util.sync import run_sync
from planexec.errors import Problem, ToolDefinitionError, UsageError
from planexec.executor import (
    Acceptance,
    Executor,
    ModelExecutor,
)
from planexec.log import (
    RunResult,
    RunStarted,
    RunState,
)
from planexec.mcp import MCPToolset
from planexec.memory import PlanMemory
from planexec.models import (
    Model,
    Providers,
    missing_keys,
    resolve_model,
)
from planexec.planner import Planner
from planexec.runtime._budget import Budget
from planexec.runtime._core import EngineConfig
from planexec.runtime._description import (
    approvals_record,
    bound,
    executors_record,
    judge_record,
    model_executors_record,
    planner_record,
    review_record,
)
from planexec.runtime._engine import Engine
from planexec.runtime._parts import assemble, split_servers
from planexec.runtime._recorded_world import Fault
from planexec.runtime._replays import ReplayReport, replay_log
from planexec.runtime._run import Run
from planexec.runtime._session import Session, check_session_id
from planexec.runtime._settings import AnswerReview, Approvals, Escalation, Limits, RunContext
from planexec.runtime._tool_specs import tool_spec
from planexec.runtime._turns import RECORD_CHARS, SessionRecord, session_record
from planexec.runtime._workflows import WorkflowSet
from planexec.store import RunStore
from planexec.telemetry import Telemetry
from planexec.tools import Tool, Toolset, Workflow
from planexec.trust import TrustPolicy

if TYPE_CHECKING:
    from planexec.faults import FaultProfile

__all__ = ["Agent", "Run"]


class Agent:
    """A planner, tools and executors, with the budgets and policies that bound every run.

    ``planner``: a :class:`Planner`, or a model (object or ``provider:name``) for the default
    upfront planner. ``executor``: the model (or :class:`ModelExecutor`) for steps that name no
    tool. ``executors``: more named executors that plans may route steps to. ``providers``: what
    the model strings of the planner, the executors and the judges resolve through, what each model
    call is charged (before the call, against the cost budget, and after it, in the log) and which
    limits calls to each provider keep to (``Providers.default()`` when None). ``name``: the agent's
    name on its runs' spans and metrics (``gen_ai.agent.name``). ``telemetry``: what its runs send
    to OpenTelemetry and the ``planexec`` logger (``Telemetry()``: the global providers, no content).
    ``memory``: plan memory (:class:`~planexec.memory.PlanMemory`): a run whose goal is like a
    remembered one reuses its plan, and a run that meets its goal is remembered (None: no memory).
    ``workflows``: deterministic scripts the planner may hand the rest of the work to (see
    :class:`~planexec.tools.Workflow`); a hand-off's output is the run's answer.
    ``trust``: how runs treat values they do not trust — rules for tools you do not own, tools
    whose output is trusted, what happens to a call that breaks a rule, and whether calls that
    change the world with untrusted values are asked about (see :class:`~planexec.trust.TrustPolicy`;
    ``TrustPolicy()`` by default).
    """

    def __init__(
        self,
        planner: Planner | Model | str,
        *,
        tools: Sequence[Tool | Toolset | MCPToolset] | Toolset = (),
        executor: Model | str | ModelExecutor | None = None,
        executors: Sequence[Executor] = (),
        budget: Budget | None = None,
        limits: Limits | None = None,
        acceptance: Acceptance | None = None,
        approvals: Approvals | None = None,
        context: RunContext | None = None,
        store: RunStore | str | None = "default",
        escalation: Escalation | None = None,
        review: AnswerReview | None = None,
        providers: Providers | None = None,
        name: str = "planexec",
        telemetry: Telemetry | None = None,
        memory: PlanMemory | None = None,
        workflows: Sequence[Workflow] = (),
        trust: TrustPolicy | None = None,
    ) -> None:
        own, self._mcp = split_servers([tools] if isinstance(tools, Toolset) else list(tools))
        """MCP servers' toolsets: opened by ``open`` (or the first run), closed by ``aclose``."""
        self._parts = assemble(planner, own, executor, executors)
        self._own_tools = self._parts.tools
        self._mcp_listed: tuple[tuple[Tool, ...], ...] = ()
        self._opened: list[MCPToolset] = []
        self.providers = Providers.default() if providers is None else providers
        self._store_spec = store
        self._described: dict[str, Any] | None = None
        self._store: RunStore | None = store if isinstance(store, RunStore) else None
        self.budget = budget or Budget()
        self.limits = limits or Limits()
        self.acceptance = acceptance or Acceptance()
        self.approvals = approvals or Approvals()
        self.context = context or RunContext()
        self.escalation = escalation or Escalation()
        self.review = review
        self.name = name
        self.telemetry = Telemetry() if telemetry is None else telemetry
        self.memory = memory
        self.trust = TrustPolicy() if trust is None else trust
        problems = WorkflowSet.problems(workflows, self._parts.tools)
        self._workflows = WorkflowSet(workflows if not problems else ())
        if not isinstance(self.trust, TrustPolicy):
            problems.append(Problem(code="agent", where="trust", message="must be a TrustPolicy(...) or None"))
        elif not self._mcp:  # an MCP server's tools are known once it is open: checked when a run starts
            problems += self._trust_problems()
        if memory is not None and not isinstance(memory, PlanMemory):
            problems.append(Problem(code="agent", where="memory", message="must be a PlanMemory(...) or None"))
        if not isinstance(name, str) or not name.strip() or len(name) > 200 or not name.isprintable():
            problems.append(
                Problem(code="agent", where="name", message="must be printable text of 1 to 200 characters")
            )
        if not isinstance(self.telemetry, Telemetry):
            problems.append(Problem(code="agent", where="telemetry", message="must be a Telemetry(...)"))
        if self.escalation is not None and not isinstance(self.escalation, Escalation):
            problems.append(Problem(code="agent", where="escalation", message="must be an Escalation"))
        if review is not None and not isinstance(review, AnswerReview):
            problems.append(Problem(code="agent", where="review", message="must be an AnswerReview"))
        if not isinstance(self.providers, Providers):
            problems.append(Problem(code="agent", where="providers", message="must be a Providers value"))
        for name, kind in (
            ("budget", Budget),
            ("limits", Limits),
            ("acceptance", Acceptance),
            ("approvals", Approvals),
        ):
            if not isinstance(getattr(self, name), kind):
                problems.append(Problem(code="agent", where=name, message=f"must be a {kind.__name__}(...)"))
        if not isinstance(self.context, RunContext):
            problems.append(Problem(code="agent", where="context", message="must be a RunContext(...)"))
        if problems:
            raise UsageError("invalid agent", problems)

    @property
    def planner(self) -> Planner:
        return self._parts.planner

    @property
    def tools(self) -> Toolset:
        """The agent's tools, its MCP servers' as they last listed them included."""
        return self._current_tools()

    def use_tools(self, tools: Sequence[Tool | Toolset] | Toolset) -> None:
        """Change the agent's own tools (its MCP servers' stay as they are): runs started from now
        on — the next turn of a session — plan and act with these, and their ``run_started`` lists
        them. A run under way keeps the tools it started with. Two tools with one name raise
        :class:`ToolDefinitionError`; an MCP server is given to the agent when it is made."""
        if isinstance(tools, str | bytes) or not isinstance(tools, Toolset | Iterable):
            problem = Problem(code="agent", where="tools", message="must be a list of tools or a Toolset")
            raise UsageError("tools cannot be changed this way", [problem])
        given, servers = split_servers([tools] if isinstance(tools, Toolset) else list(tools))
        problems = [
            Problem(code="agent", where=f"tools: MCP server {t.label}", message="is given when the agent is made")
            for t in servers
        ]
        try:
            own = Toolset(*given)
        except ToolDefinitionError as e:
            if not problems:
                raise
            problems += e.problems
        if problems:
            raise UsageError("tools cannot be changed this way", problems)
        listed = self._mcp_listed
        tools_now = Toolset(*own, *(tool for toolset in listed for tool in toolset))
        self._own_tools = own
        self._parts = dataclasses.replace(self._parts, tools=tools_now)
        self._described = None

    @property
    def workflows(self) -> tuple[Workflow, ...]:
        """The workflows the planner may hand the rest of the work to."""
        return self._workflows.workflows

    @property
    def executors(self) -> Mapping[str, Executor]:
        """The executors steps are routed to, by name (the built-in ``tools`` executor included)."""
        return MappingProxyType(self._parts.executors)

    @property
    def store(self) -> RunStore | None:
        """Where this agent's runs are logged (None: in memory only, not resumable)."""
        if self._store is None and isinstance(self._store_spec, str):
            from planexec.store import open_store

            self._store = open_store(None if self._store_spec == "default" else self._store_spec)
        return self._store

    async def open(self) -> None:
        """Connect the agent's MCP servers and list their tools (again, for a server that said its
        tools changed). ``run``, ``resume`` and ``replay`` call it; ``async with agent:`` too."""
        todo = [t for t in self._mcp if not t.is_open or t.changed]
        opened = await asyncio.gather(*(self._open_one(t) for t in todo), return_exceptions=True)
        errors = [e for e in opened if isinstance(e, BaseException)]
        if errors:
            raise errors[0]
        self._sync_tools()

    async def _open_one(self, toolset: MCPToolset) -> None:
        if toolset.is_open:
            await toolset.refresh()
            return
        await toolset.open()
        self._opened.append(toolset)

    def _sync_tools(self) -> None:
        """The agent's tools: its own, and the MCP servers' as last listed."""
        listed = tuple(tuple(t) for t in self._mcp)
        if listed != self._mcp_listed:
            tools = Toolset(*self._own_tools, *(tool for toolset in listed for tool in toolset))
            self._parts = dataclasses.replace(self._parts, tools=tools)
            self._mcp_listed, self._described = listed, None

    async def __aenter__(self) -> Agent:
        await self.open()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the MCP servers and the store this agent opened itself (a store object passed
        in is left open, and so is a toolset the caller opened)."""
        opened, self._opened = self._opened, []
        for toolset in opened:
            await toolset.close()
        if self._store is not None and isinstance(self._store_spec, str):
            await self._store.close()
            self._store = None

    def _config(self, metadata: Mapping[str, Any], *, budget: Budget | None = None) -> EngineConfig:
        parts = self._parts
        turn = session_record(metadata)
        if budget is None and turn is not None and turn.budget is not None:
            budget = turn.budget  # a session's turn keeps the budget it was given, resumed or forked
        return EngineConfig(
            planner=bound(parts.planner, self.providers),
            tools=self._workflows.with_tools(parts.tools),
            workflows=self._workflows.names,
            executors={name: bound(e, self.providers) for name, e in parts.executors.items()},
            default_executor=parts.default_executor,
            budget=self.budget if budget is None else budget,
            limits=self.limits,
            acceptance=self.acceptance,
            approvals=self.approvals,
            context=self.context,
            metadata={**self.description(), **metadata},
            escalation=self.escalation,
            review=self.review,
            providers=self.providers,
            current_tools=(lambda: self._workflows.with_tools(self._current_tools())) if self._mcp else None,
            telemetry=self.telemetry,
            agent_name=self.name,
            conversation=None if turn is None else turn.earlier,
            conversation_untrusted=turn is not None and turn.untrusted,
            memory=self.memory,
            trust=self.trust,
        )

    def _current_tools(self) -> Toolset:
        """The agent's tools with its MCP servers' as they list them now (a run takes them up
        before each planning round)."""
        self._sync_tools()
        return self._parts.tools

    def description(self) -> dict[str, Any]:
        """What this agent's runs record about its set-up (data only; no code): its tools,
        executors, planner, rules and approvals, as each run's first event keeps them. Made once
        (until its tools change): an agent's set-up does not change between its runs."""
        if self._described is None:
            self._described = self._describe()
        return dict(self._described)

    def _describe(self) -> dict[str, Any]:
        parts, providers, store = self._parts, self.providers, self.store
        return {
            "tools": [tool_spec(t) for t in self._workflows.with_tools(parts.tools)],
            **({"workflows": sorted(self._workflows.names)} if self._workflows.workflows else {}),
            **executors_record(parts.executors, providers),
            "default_executor": parts.default_executor,
            "planner": planner_record(parts.planner, providers),
            "escalation": dataclasses.asdict(self.escalation),
            "review": review_record(self.review),
            "model_executors": model_executors_record(parts.executors, providers),
            **judge_record(self.acceptance, providers),
            "limits": dataclasses.asdict(self.limits),
            "approvals": approvals_record(self.approvals, has_store=store is not None, raises=self._raises()),
            "predicates": sorted(self.acceptance.predicates),
            **({"memory": self.memory.describe()} if self.memory is not None else {}),
            "trust": self.trust.record(),
        }

    def _trust_problems(self) -> list[Problem]:
        """What is wrong with the trust policy for this agent's tools (and workflows)."""
        tools = self._workflows.with_tools(self._parts.tools)
        return self.trust.tool_problems({t.name: t.parameters for t in tools})

    def _raises(self) -> bool:
        """Whether a run of this agent asks a human to raise a cap it reaches (``Limits.on_budget``)."""
        rule = self.limits.on_budget
        if rule == "ask":
            return self._can_ask()
        return rule == "auto" and self.approvals.approver is not None

    def _can_ask(self) -> bool:
        return self.approvals.approver is not None or (self.approvals.deferred and self.store is not None)

    def start(
        self,
        goal: str,
        *,
        constraints: Sequence[str] = (),
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        budget: Budget | None = None,
    ) -> Run:
        """Start a run in the running event loop and return its handle at once.

        ``metadata`` (JSON data) is recorded with the run, e.g. how to rebuild this agent.
        ``budget``: this run's caps instead of the agent's.
        """
        problems = [Problem(code="goal", where="goal", message="the goal is empty")] if not goal.strip() else []
        problems += self._closed_toolsets()
        if self._mcp and not problems:
            problems += self._trust_problems()
        if budget is not None and not isinstance(budget, Budget):
            problems.append(Problem(code="budget", where="budget", message="must be a Budget(...)"))
        if self.review is not None and self.review.checklist and not self._can_ask():
            problems.append(
                Problem(
                    code="review",
                    where="review",
                    message="the final answer's checklist needs a human reviewer: give an approver, or deferred "
                    "approvals with a store",
                )
            )
        self._check_models(problems)
        engine = Engine(
            self._config(metadata or {}, budget=budget),
            goal=goal,
            constraints=tuple(constraints),
            run_id=run_id or self.context.new_id(),
            store=self.store,
        )
        return Run(engine)

    def _closed_toolsets(self) -> list[Problem]:
        """An MCP toolset that is not open (``start`` cannot wait for it): a problem each."""
        closed = [t for t in self._mcp if not t.is_open]
        if not closed:
            self._sync_tools()
        message = "is not open: use `async with agent:` or `await agent.open()` first (`agent.run` opens it)"
        return [Problem(code="mcp", where=f"tools: MCP server {t.label}", message=message) for t in closed]

    def _check_models(self, problems: list[Problem]) -> None:
        """Refuse to start, before anything is logged, when ``problems`` or any model's missing API
        key (planner, executors, judge) says the run cannot go on: every problem at once."""
        parts = self._parts
        models: list[object] = [*parts.planner.resolved_models(self.providers)]
        models += [e.resolved_model(self.providers) for e in parts.executors.values() if isinstance(e, ModelExecutor)]
        judge = self.acceptance.judge
        if judge is not None:
            models.append(resolve_model(judge, providers=self.providers) if isinstance(judge, str) else judge)
        problems = problems + missing_keys(models)
        if problems:
            raise UsageError("the run cannot start", problems)

    async def replay(
        self,
        run_id: str,
        *,
        fork_at: int | None = None,
        fault: Fault | None = None,
        new_run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        faults: FaultProfile | None = None,
    ) -> ReplayReport:
        """Replay a run from this agent's store, with no model and no tool called.

        ``fork_at=N`` keeps the first N events and goes on live from there with this agent's
        models and tools, as a new run; ``fault=Fault(step_id=..., kind=...)`` replays until that
        step and fails it instead, then goes on live the same way; ``faults=FaultProfile(...)``
        replays until the first call the profile spoils and goes on live there with this agent's
        tools and models wrapped by the profile. ``metadata`` is recorded with the new run.
        """
        forking = fork_at is not None or fault is not None or faults is not None
        if forking:
            if self._mcp:
                await self.open()  # a fork goes on live with this agent's tools
            self._check_models([])  # and its models
        store = self.store
        if store is None:
            raise UsageError("this agent has no store to replay from")
        log = [s.event for s in await store.read(run_id)]
        if not log:
            raise UsageError(f"no run {run_id!r} in the store")
        first = log[0]
        config = None
        if forking and isinstance(first, RunStarted):
            session = {"session": first.config["session"]} if "session" in first.config else {}
            config = self._config({**session, **(metadata or {}), "forked_from": run_id})
        return await replay_log(
            log,
            config=config,
            fork_at=fork_at,
            fault=fault,
            faults=faults,
            store=store,
            run_id=new_run_id,
            providers=self.providers,
        )

    async def resume(self, run_id: str) -> Run:
        """Pick a run up from its log in this agent's store and go on with it.

        Finished steps are never run again; see :mod:`planexec.runtime` for what happens to steps
        that were under way. A finished run is returned as it is.
        """
        if self._mcp:
            await self.open()
        self._check_models([])
        store = self.store
        if store is None:
            raise UsageError("this agent has no store: runs without a store cannot be resumed")
        history = [s.event for s in await store.read(run_id)]
        if not history:
            raise UsageError(f"no run {run_id!r} in the store")
        first = history[0]
        if not isinstance(first, RunStarted):
            raise UsageError(f"the log of run {run_id!r} does not begin with run_started")
        engine = Engine(
            self._config(first.config),
            goal=first.goal,
            constraints=first.constraints,
            run_id=run_id,
            store=store,
            history=history,
        )
        return Run(engine)

    def session(
        self, session_id: str | None = None, *, budget: Budget | None = None, record_chars: int = RECORD_CHARS
    ) -> Session:
        """A new session: goals run one after another as turns of one conversation (see
        :mod:`planexec.runtime._session`). ``budget`` caps the whole session; ``record_chars``
        bounds the record of earlier turns each turn's planner is shown. To go on with a session
        in the store, use :meth:`open_session`."""
        return Session(self, session_id or f"session-{self.context.new_id()}", budget=budget, record_chars=record_chars)

    async def open_session(
        self, session_id: str, *, budget: Budget | None = None, record_chars: int = RECORD_CHARS
    ) -> Session:
        """The session ``session_id`` as this agent's store has it (no turn yet: a new one), to run
        more turns in. A last turn left unfinished (a crash, a question for a human) is
        :attr:`Session.unfinished`: go on with it with :meth:`Session.resume`. ``budget``: caps on
        the whole session; None: those its last turn ran under (none for a new session)."""
        problems = check_session_id(session_id)
        if problems:
            raise UsageError("invalid session", problems)
        store = self.store
        if store is None:
            raise UsageError("this agent has no store: a session can only be opened from one")
        rows = await store.list_runs(session=session_id, limit=100_000)
        rows.sort(key=lambda r: (r.turn or 0, r.started_at))
        turns: list[RunResult] = []
        unfinished: str | None = None
        recorded: SessionRecord | None = None
        for row in rows:
            log = [e.event for e in await store.read(row.run_id)]
            first = log[0] if log else None
            if isinstance(first, RunStarted):
                recorded = session_record(first.config) or recorded
            state = RunState.fold(log)
            if not state.finished and row is rows[-1]:
                unfinished = row.run_id
                continue
            turns.append(RunResult.from_state(state, log))
        if budget is None and recorded is not None:
            budget = recorded.session_budget  # the session goes on under the caps it began with
        session = Session(self, session_id, budget=budget, record_chars=record_chars, turns=turns)
        session.unfinished = unfinished
        return session

    async def run(self, goal: str, *, constraints: Sequence[str] = (), run_id: str | None = None) -> RunResult:
        """Run a goal to its stop and return the result (also when the goal was not met)."""
        if self._mcp:
            await self.open()
        handle = self.start(goal, constraints=constraints, run_id=run_id)
        try:
            return await handle.result()
        except asyncio.CancelledError:
            handle.cancel()
            await asyncio.gather(handle._task, return_exceptions=True)
            raise

    def run_sync(self, goal: str, *, constraints: Sequence[str] = (), run_id: str | None = None) -> RunResult:
        """``run`` for code without an event loop. Inside a running one (Jupyter, async code) it raises
        :class:`UsageError`: ``await agent.run(...)`` there instead."""
        return run_sync(
            lambda: self.run(goal, constraints=constraints, run_id=run_id),
            call="Agent.run_sync()",
            instead="agent.run(...)",
        )
