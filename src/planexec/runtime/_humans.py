"""Humans in the loop: the confidence gate, approvals of plans and steps, and uncertain effects.

Every question is an ``approval_requested`` event with a stable id, and every answer an
``approval_decided`` event, whoever gives it: the approver callback in this process, a caller of
``Run.decide`` (an API, a web page), or another process writing the answer into the run's store
(the CLI). Many questions can be open at once; each waits on its own future, so other branches
keep running meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any, Protocol

from planexec._util.strict_json import json_problem
from planexec.errors import Problem, UsageError
from planexec.executor import CheckResult, StepError, StepFailure, Verdict
from planexec.log import ApprovalDecided, ApprovalRecord, ApprovalRequested, ChecklistResult, Event, QuestionRule
from planexec.models import cancelled_for_real
from planexec.plan import Step
from planexec.runtime._budget import Budget
from planexec.runtime._core import Core
from planexec.runtime._journal import Journal
from planexec.runtime._settings import ApprovalDecision, ApprovalRequest
from planexec.runtime._trust import Trust, TrustRefused
from planexec.store import Redactor
from planexec.tools import Tool
from planexec.trust import Provenance, Violation
from planexec.views import QuestionView, question_view

__all__ = ["Humans", "check_decision", "decided_event"]


class Loop(Core, Protocol):
    """What the humans in the loop see of it, beyond :class:`Core`."""

    journal: Journal | None
    trust: Trust

    @property
    def planning_idle(self) -> bool: ...

    @property
    def running_steps(self) -> Mapping[str, tuple[asyncio.Task[None], int]]: ...

    @property
    def steps_waiting_for_plan(self) -> Collection[str]: ...

    def side_effecting(self, step: Step) -> bool: ...


class Humans:
    """The engine's side of every question to a human."""

    def __init__(self, engine: Loop) -> None:
        self._engine = engine
        self._futures: dict[str, asyncio.Future[ApprovalDecision]] = {}
        self.waiting_steps: set[str] = set()
        """Steps whose task is blocked on a human's answer."""
        self.planning_waits = False
        self._callbacks: set[asyncio.Task[None]] = set()
        self._poller: asyncio.Task[None] | None = None

    def _gated(self, tool: str | None) -> bool:
        """Whether every call of ``tool`` passes the gate (as the run's tools are now)."""
        tools = self._engine.config.tools
        if tool is None or tool not in tools:
            return False
        spec = tools.get(tool)
        return spec.sensitive or spec.requires_approval

    @property
    def open_questions(self) -> list[str]:
        return list(self._futures)

    # -- the gate before a step runs ---------------------------------------------------------

    def may_ask(self, step: Step) -> bool:
        """Whether ``gate`` can do anything for ``step`` (a cheap test that spares most steps a wait)."""
        if step.approval == "always" or step.confidence is not None or self._gated(step.tool):
            return True
        engine = self._engine
        approvals = engine.config.approvals
        if approvals.steps == "all":
            return True
        trust = engine.trust
        if trust.on and trust.rule_sets(step.tool):
            return True
        if not engine.side_effecting(step):
            return False
        if trust.asks_about_effects():
            return True
        return approvals.plan or (approvals.patched_effects and engine.can_ask_humans and len(engine.state.plans) > 1)

    def _tool_of(self, step: Step) -> Tool | None:
        tools = self._engine.config.tools
        return tools.get(step.tool) if step.tool is not None and step.tool in tools else None

    def _patched(self, step: Step) -> bool:
        """Whether ``step`` changes the world and a patch (a plan version after the first) added or
        changed it, against the plan a human last approved, or else the run's first plan: the
        planner had read the run's results by then, and no human saw the step."""
        engine = self._engine
        approvals = engine.config.approvals
        state = engine.state
        if approvals.plan or not approvals.patched_effects or not state.plans or not engine.side_effecting(step):
            return False
        version = state.steps[step.id].plan_version
        first = state.plans[0]
        if version <= first.version:
            return False
        base = state.last_approved_plan() or first
        before = next((s for s in base.steps if s.id == step.id), None)
        return before != step

    def _unapproved(self, step: Step) -> bool:
        """Whether ``step`` changes the world and came after the plan a human approved: with plan
        approval on, an approval covers only the plan versions it showed."""
        engine = self._engine
        if not engine.config.approvals.plan or not engine.side_effecting(step):
            return False
        version = engine.state.steps[step.id].plan_version
        return not any(
            a.subject == "plan" and a.approved and a.plan_version == version for a in engine.state.approvals.values()
        )

    def _trust_findings(
        self, step: Step, args: dict[str, Any], labels: dict[str, Provenance] | None
    ) -> tuple[tuple[Violation, ...], tuple[Violation, ...]]:
        """The trust rules the step's call breaks, and what the default rule on untrusted effects
        finds (only when a human can be asked)."""
        engine = self._engine
        trust = engine.trust
        if not trust.on or labels is None or step.tool is None:
            return (), ()
        call = trust.written(step.id)
        broken = trust.violations(step.tool, args, labels, call, step_id=step.id)
        untrusted: tuple[Violation, ...] = ()
        if trust.asks_about_effects() and engine.side_effecting(step):
            named = {v.argument for v in broken}  # an argument that breaks a rule is listed once, for the rule
            found = trust.untrusted_effect(step.tool, labels, call, step_id=step.id)
            untrusted = tuple(v for v in found if v.argument not in named)
        return broken, untrusted

    async def gate(self, step: Step, args: dict[str, Any], labels: dict[str, Provenance] | None = None) -> str | None:
        """The confidence gate, step approvals and trust rules; raises ``StepFailure`` when the step
        may not run (``TrustRefused`` when it breaks a trust rule and is refused). ``args``: the
        step's arguments as they will be sent, ``labels`` where each comes from (a human is shown
        exactly these). Returns who said yes, when a human let the step through.

        Gates come from the developer's configuration: a tool that ``requires_approval``,
        ``Approvals(steps=...)``, plan approval, side-effecting steps a patch adds, trust rules and
        untrusted values steering effects. A plan may make a step stricter (``approval:
        "always"``) but never lift a gate: ``"never"`` is read as ``"auto"``.
        """
        engine = self._engine
        cfg = engine.config
        approvals = cfg.approvals
        can_ask = engine.can_ask_humans
        tool = self._tool_of(step)
        sensitive = tool is not None and tool.sensitive
        required = (
            step.approval == "always" or (tool is not None and tool.requires_approval) or approvals.steps == "all"
        )
        broken, untrusted = self._trust_findings(step, args, labels)
        policy = cfg.trust
        if broken and (not can_ask or (policy is not None and policy.on_violation == "refuse")):
            raise TrustRefused(broken)
        unapproved = self._unapproved(step)
        patched = can_ask and self._patched(step)
        low = step.confidence is not None and step.confidence < cfg.limits.confidence_threshold
        ask = (
            required
            or unapproved
            or patched
            or bool(broken)
            or bool(untrusted)
            or (sensitive and (low or approvals.steps == "sensitive"))
        )
        if not ask:
            return None
        if not can_ask:
            if sensitive and low and not required and not unapproved:
                raise StepFailure(
                    StepError(
                        kind="low_confidence",
                        message=f"sensitive step not run: confidence {step.confidence:.2f} is under "
                        f"{cfg.limits.confidence_threshold:.2f} and no human can approve it",
                    )
                )
            if not (required or unapproved):
                return None  # a sensitive tool is asked about only when someone can be asked
            raise StepFailure(
                StepError(kind="rejected", message="the step needs a human's approval and no approver is configured")
            )
        rule: QuestionRule
        if sensitive and low:
            why, rule = f"low confidence ({step.confidence:.2f}) on a sensitive step", "low_confidence"
        elif tool is not None and tool.requires_approval:
            why, rule = f"tool {tool.name} always needs approval", "tool_requires_approval"
        elif broken:
            why, rule = f"an argument breaks a trust rule: {broken[0]}", "argument_rule"
        elif unapproved:
            why, rule = "a step that changes the world, added after the plan was approved", "unapproved_change"
        elif patched:
            why, rule = "a step that changes the world, added or changed by a patch", "patched_effect"
        elif sensitive and (low or approvals.steps == "sensitive"):
            why, rule = f"sensitive tool {tool.name if tool else step.tool}", "sensitive_tool"
        elif step.approval == "always":
            why, rule = "approval policy always", "step_always"
        elif approvals.steps == "all":
            why, rule = f"approval policy {approvals.steps!r}", "all_steps"
        else:
            why, rule = "a step that changes the world, steered by untrusted values", "untrusted_effect"
        version = engine.state.steps[step.id].plan_version
        earlier = self._earlier(step.id, "step", version)
        self.waiting_steps.add(step.id)
        engine.wake()
        try:
            if earlier is not None and earlier.approved is not None:
                decision = _decision_of(earlier)
            else:
                request = ApprovalRequest(
                    approval_id="",
                    run_id=engine.run_id,
                    subject="step",
                    step=step,
                    reason=why,
                    rule=rule,
                    args=args,
                    provenance=labels,
                    violations=(*broken, *untrusted),
                )
                decision = await self.ask(request, version=version, existing=earlier)
        finally:
            self.waiting_steps.discard(step.id)
        if not decision.approved:
            raise StepFailure(StepError(kind="rejected", message=f"a human rejected the step: {decision.reason}"))
        return decision.by or "human"

    def _earlier(self, step_id: str, subject: str, version: int) -> ApprovalRecord | None:
        """The newest question already asked about this step in this plan version (after a restart)."""
        found = None
        for rec in self._engine.state.approvals.values():
            if rec.subject == subject and rec.step_id == step_id and rec.plan_version == version:
                found = rec
        return found

    # -- asking, and answers from anywhere ---------------------------------------------------

    async def ask(
        self, request: ApprovalRequest, *, version: int | None, existing: ApprovalRecord | None = None
    ) -> ApprovalDecision:
        """Ask (or, after a restart, ask again under the same id) and wait for the answer."""
        engine = self._engine
        if existing is not None:
            approval_id = existing.approval_id
        else:
            step_id = request.step.id if request.step else None
            await engine.world.turn(lambda e: isinstance(e, ApprovalRequested) and e.step_id == step_id)
            approval_id = engine.new_id()
            engine.emit(
                ApprovalRequested(
                    at=engine.now(),
                    approval_id=approval_id,
                    subject=request.subject,
                    step_id=request.step.id if request.step else None,
                    plan_version=version,
                    reason=request.reason,
                    plan=request.plan if request.subject == "plan" else None,
                    code=request.code,  # type: ignore[arg-type]
                    output=request.output,
                    verdict=request.verdict,
                    checklist=request.checklist,
                    rule=request.rule,
                    args=request.args,
                    budget=request.budget,
                    provenance=dict(request.provenance) if request.provenance is not None else None,
                    violations=request.violations,
                )
            )
        request = replace(request, approval_id=approval_id, view=self.view(approval_id))
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        self._futures[approval_id] = future
        approver = engine.config.approvals.approver
        known = engine.world.decision(approval_id)
        if known is not None:
            task = asyncio.create_task(known, name=f"approval:{approval_id}")
            self._callbacks.add(task)
            task.add_done_callback(self._callbacks.discard)
        elif approver is not None:
            task = asyncio.create_task(self._ask_callback(request), name=f"approval:{approval_id}")
            self._callbacks.add(task)
            task.add_done_callback(self._callbacks.discard)
        elif engine.journal is not None:
            await engine.journal.flush()  # the question is saved before anyone is expected to answer it
            if engine.config.approvals.when_waiting == "wait":
                self._watch_store()
        try:
            return await future
        finally:
            self._futures.pop(approval_id, None)

    async def _ask_callback(self, request: ApprovalRequest) -> None:
        """Ask the approver callback. Whatever goes wrong with it — it raises, it answers something
        that is not ``True``, ``False`` or a valid :class:`ApprovalDecision` — counts as a refusal
        that says why: a broken approver never approves."""
        approver = self._engine.config.approvals.approver
        assert approver is not None
        try:
            decision = self._checked(request.approval_id, await approver(request))
        except Exception as e:
            decision = _refusal(f"the approver failed: {type(e).__name__}: {e}")
        except BaseException as e:  # a real cancellation goes on
            if cancelled_for_real(e):
                raise
            decision = _refusal(f"the approver raised {type(e).__name__}")
        if request.approval_id in self._futures:
            self.decide(request.approval_id, decision)

    def _checked(self, approval_id: str, answer: object) -> ApprovalDecision:
        if type(answer) is bool:
            return ApprovalDecision(approved=answer)
        if not isinstance(answer, ApprovalDecision):
            return _refusal(
                f"the approver answered with {type(answer).__name__}, not True, False or an ApprovalDecision"
            )
        if type(answer.approved) is not bool:
            return _refusal(f"the approver's decision has approved={answer.approved!r}, not True or False")
        record = self._engine.state.approvals.get(approval_id)
        problems = check_decision(record, answer) if record is not None else []
        if problems:
            return _refusal("the approver's decision is invalid: " + "; ".join(p.message for p in problems))
        return answer

    def decide(self, approval_id: str, decision: ApprovalDecision) -> None:
        """Record a human's answer (from this process) and release whoever waits for it."""
        engine = self._engine
        record = engine.state.approvals.get(approval_id)
        if record is None:
            raise UsageError(f"run {engine.run_id} has no approval {approval_id!r}")
        problems = check_decision(record, decision)
        if problems:
            raise UsageError(f"invalid answer to approval {approval_id}", problems)
        engine.emit(decided_event(approval_id, decision, at=engine.now()))
        self._release(approval_id)

    def answered_elsewhere(self, events: list[Event]) -> None:
        """Answers another process wrote into the store: they are in the log; release the waiters."""
        for e in events:
            if isinstance(e, ApprovalDecided):
                self._release(e.approval_id)

    def _release(self, approval_id: str) -> None:
        future = self._futures.get(approval_id)
        record = self._engine.state.approvals.get(approval_id)
        if future is not None and not future.done() and record is not None and record.approved is not None:
            future.set_result(_decision_of(record))

    def _watch_store(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name=f"approvals:{self._engine.run_id}")

    async def _poll(self) -> None:
        engine = self._engine
        journal = engine.journal
        assert journal is not None
        while self._futures:  # woken by the store when an answer is stored, from any process it hears
            await journal.store.wait_for_events(
                engine.run_id, after=journal.persisted, within=engine.config.approvals.poll_interval
            )
            await journal.catch_up()

    async def review(self, step: Step, output: Any, verdict: Verdict) -> Verdict:
        """A human reviews a result that failed its checks: accepted, it passes (the review is
        added to the verdict); refused, it keeps failing, with the human's reason."""
        engine = self._engine
        failures = "; ".join(f"{c.name}: {c.detail}" for c in verdict.failures)
        request = ApprovalRequest(
            approval_id="",
            run_id=engine.run_id,
            subject="review",
            step=step,
            reason=f"the result failed its checks ({failures}): accept it or refuse it",
            output=output,
            verdict=verdict,
            rule="result_failed_checks",
        )
        version = engine.state.steps[step.id].plan_version
        earlier = self._earlier(step.id, "review", version)
        self.waiting_steps.add(step.id)
        engine.wake()
        try:
            if earlier is not None and earlier.approved is not None:
                decision = _decision_of(earlier)
            else:
                decision = await self.ask(request, version=version, existing=earlier)
        finally:
            self.waiting_steps.discard(step.id)
        why = decision.reason or "no reason given"
        result = CheckResult(
            name="review",
            passed=decision.approved,
            detail=f"{'accepted' if decision.approved else 'refused'} by {decision.by}: {why}",
        )
        return Verdict(passed=decision.approved, checks=(*verdict.checks, result))

    async def await_effect(self, step: Step, approval_id: str) -> ApprovalDecision:
        """Wait for a human to settle a held step: retry, skip, or mark it done."""
        self.waiting_steps.add(step.id)
        self._engine.wake()
        try:
            record = self._engine.state.approvals[approval_id]
            if record.approved is not None:
                return ApprovalDecision(
                    approved=record.approved,
                    reason=record.decision_reason,
                    choice=record.choice,
                    output=record.output,
                )
            request = ApprovalRequest(
                approval_id=approval_id,
                run_id=self._engine.run_id,
                subject="effect",
                step=step,
                reason=record.reason,
                rule="effect_uncertain",
                args=record.args,
            )
            return await self.ask(request, version=record.plan_version, existing=record)
        finally:
            self.waiting_steps.discard(step.id)

    def view(self, approval_id: str) -> QuestionView | None:
        """What a human is shown of question ``approval_id``, redacted as the run's store redacts."""
        engine = self._engine
        record = engine.state.approvals.get(approval_id)
        if record is None:
            return None
        journal = engine.journal
        found = getattr(journal.store, "redactor", None) if journal is not None else None
        redactor = found if isinstance(found, Redactor) else _DEFAULT_REDACTOR
        return question_view(engine.state, record, redactor=redactor, run_id=engine.run_id)

    def blocked(self) -> bool:
        """Whether everything under way waits for a human."""
        if not self._futures:
            return False
        engine = self._engine
        running = engine.running_steps.keys() - self.waiting_steps
        if not running:
            return engine.planning_idle or self.planning_waits
        # steps that wait for the planning round to end wait for a human too when the round does
        return self.planning_waits and running <= set(engine.steps_waiting_for_plan)

    async def close(self) -> None:
        tasks = [*self._callbacks, *([self._poller] if self._poller is not None else [])]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


DEFAULT_BUDGET = Budget()
_DEFAULT_REDACTOR = Redactor()
"""What a run without a store redacts from what it shows a human (as a store would by default)."""

_CHOICES_OF: dict[str, tuple[str, ...]] = {"effect": ("retry", "skip", "done"), "escalation": ("guidance", "replan")}


def check_decision(record: ApprovalRecord, decision: ApprovalDecision) -> list[Problem]:
    """What is wrong with ``decision`` as an answer to ``record`` (empty when nothing)."""
    where = f"approval {record.approval_id}"
    problems: list[Problem] = []
    subject = record.subject

    def add(code: str, message: str) -> None:
        problems.append(Problem(code=code, where=where, message=message))

    if record.approved is not None:
        add("decided", "it has been answered already")
    choices = _CHOICES_OF.get(subject, ())
    if decision.choice is not None and decision.choice not in choices:
        if choices:
            add("choice", f"a {subject} is answered with one of: {', '.join(choices)}")
        else:
            add("choice", "a choice answers only an uncertain effect or an escalation")
    if subject == "effect" and decision.approved and decision.choice is None:
        add("choice", "an uncertain effect needs a choice: retry, skip or done")
    if subject == "escalation" and decision.approved and decision.choice is None:
        add("choice", "an escalation needs a choice: guidance (with text) or replan; refuse it to stop the run")
    text = decision.text
    if text is not None and not isinstance(text, str):
        add("text", "text must be text")
        text = None
    if subject == "question":
        if not decision.approved:
            add("text", "a question is answered, not refused: give the answer as text")
        elif text is None or not text.strip():
            add("text", "a question needs an answer (text)")
    elif subject == "escalation":
        if decision.choice == "guidance" and (text is None or not text.strip()):
            add("text", "guidance needs text")
        if decision.choice == "replan" and text is not None:
            add("text", "replan takes no text; give guidance instead")
    elif text is not None:
        add("text", "text answers only a question or gives guidance on an escalation")
    if decision.checklist:
        if subject != "answer":
            add("checklist", "a checklist answers only the review of a final answer")
        else:
            items = set(record.checklist)
            seen: set[str] = set()
            for result in decision.checklist:
                item = getattr(result, "item", None)
                if not isinstance(result, ChecklistResult):
                    add("checklist", f"{type(result).__name__} is not a ChecklistResult(item=..., passed=...)")
                    continue
                if type(result.passed) is not bool:
                    add("checklist", f"{item!r}: passed must be True or False")
                if not isinstance(result.note, str):
                    add("checklist", f"{item!r}: the note must be text")
                elif (note := json_problem(result.note, where="note")) is not None:
                    add("checklist", f"{item!r}: the note is too long ({note.message})")
                if item not in items:
                    add("checklist", f"{item!r} is not an item of the checklist")
                elif item in seen:
                    add("checklist", f"{item!r} is answered twice")
                else:
                    seen.add(item)
                if decision.approved and getattr(result, "passed", True) is not True:
                    add("checklist", f"{item!r} failed, so the answer cannot be approved: refuse it")
    if decision.edited_plan is not None and subject != "plan":
        add("edit", "only a plan can be edited")
    caps = decision.budget
    if caps is not None and subject != "budget":
        add("budget", "caps are raised only in answer to a budget question")
    elif subject == "budget":
        if decision.approved:
            problems += _raise_problems(record, caps, where)
        elif caps:
            add("budget", "a refusal raises no cap")
    output = json_problem(decision.output, where="output")
    if output is not None:
        add("output", f"{output.where}: {output.message}")
    if text is not None:
        text_problem = json_problem(text, where="text")
        if text_problem is not None:
            add("text", text_problem.message)
    for name in ("reason", "by"):
        value = getattr(decision, name)
        if not isinstance(value, str):
            add(name, f"{name} must be text")
        elif (too_long := json_problem(value, where=name)) is not None:
            add(name, f"{name} is too long ({too_long.message})")
    return problems


def _raise_problems(record: ApprovalRecord, caps: object, where: str) -> list[Problem]:
    """What is wrong with ``caps`` as the caps raised in answer to budget question ``record``."""
    problems: list[Problem] = []

    def add(message: str) -> None:
        problems.append(Problem(code="budget", where=where, message=message))

    if not isinstance(caps, Mapping) or not caps:
        add("a yes to a budget question gives the caps to raise: {name: new cap (None: no cap)}")
        return problems
    names = set(DEFAULT_BUDGET.as_dict())
    values: dict[str, Any] = {}
    for name, value in caps.items():
        if not isinstance(name, str) or name not in names:
            add(f"{name!r} is not a budget; one of: {', '.join(sorted(names))}")
            continue
        values[name] = value
    try:
        Budget(**values)
    except UsageError as e:
        for p in e.problems:
            add(f"{p.where}: {p.message}")
    hit = record.budget_hit
    name = record.budget
    if name is not None and not problems:
        if name not in values:
            add(f"the run reached its {name} cap: give a higher one (or None for no cap)")
        elif values[name] is not None and hit is not None and values[name] <= hit.used:
            add(f"{name}: {values[name]:g} is not above what the run has used ({hit.used:g})")
    return problems


def decided_event(approval_id: str, decision: ApprovalDecision, *, at: float) -> ApprovalDecided:
    """The ``approval_decided`` event that records ``decision``: the one way an answer is written,
    from this process or any other."""
    return ApprovalDecided(
        at=at,
        approval_id=approval_id,
        approved=decision.approved,
        by=decision.by,
        reason=decision.reason,
        choice=decision.choice,
        output=decision.output,
        edited_plan=decision.edited_plan,
        text=decision.text,
        checklist=tuple(decision.checklist),
        budget=dict(decision.budget) if decision.budget is not None else None,
    )


def _refusal(reason: str) -> ApprovalDecision:
    return ApprovalDecision(approved=False, reason=reason, by="approver")


def _decision_of(record: ApprovalRecord) -> ApprovalDecision:
    return ApprovalDecision(
        approved=bool(record.approved),
        reason=record.decision_reason,
        by=record.by or "human",
        choice=record.choice,
        output=record.output,
        edited_plan=record.edited_plan,
        text=record.text,
        checklist=record.checklist_results,
        budget=record.raised,
    )
