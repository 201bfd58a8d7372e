"""The one view of a question: folded from a run's state, for every surface alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from planexec._util.plural import counted
from planexec.log import ApprovalRecord, Forecast, RunState
from planexec.plan import Plan, Step
from planexec.store import Redactor
from planexec.trust import Provenance
from planexec.views._answers import answer_options, choices_of
from planexec.views._diff import diff_plans
from planexec.views._effects import effect_of, runs_on
from planexec.views._models import (
    AnsweredView,
    BudgetView,
    CheckView,
    FieldChangeView,
    ForecastView,
    PlanChangeView,
    PlanView,
    QuestionView,
    RangeView,
    SpendView,
    StepView,
)
from planexec.views._trust import provenance_view, violation_view
from planexec.views._values import arguments, shown_value

__all__ = ["about", "forecast_view", "plan_view", "question_view", "rule_of", "step_view"]


def about(rec: ApprovalRecord) -> str:
    """What a question is about, in a few words."""
    if rec.subject == "plan":
        return f"plan v{rec.plan_version}"
    if rec.subject == "effect":
        return f"the effect of step {rec.step_id}"
    if rec.subject == "question":
        return f"a question: {rec.reason}"
    if rec.subject == "escalation":
        return f"an escalation ({rec.code})"
    if rec.subject == "review":
        return f"the result of step {rec.step_id}"
    if rec.subject == "answer":
        return "the final answer"
    if rec.subject == "budget":
        return f"the {rec.budget} budget"
    return f"step {rec.step_id}"


_STEP_RULES = (
    ("low confidence", "low_confidence"),
    ("always needs approval", "tool_requires_approval"),
    ("added after the plan was approved", "unapproved_change"),
    ("sensitive tool", "sensitive_tool"),
    ("approval policy 'all'", "all_steps"),
    ("approval policy always", "step_always"),
)
_SUBJECT_RULES = {
    "plan": "plan_approval",
    "effect": "effect_uncertain",
    "review": "result_failed_checks",
    "answer": "answer_checklist",
    "question": "planner_question",
    "budget": "budget_cap",
}


def rule_of(rec: ApprovalRecord) -> str:
    """The rule that asked ``rec``: as logged, or (logs before event schema 11) as its words say."""
    if rec.rule is not None:
        return rec.rule
    if rec.subject == "escalation":
        return rec.code or "escalation"
    if rec.subject == "step":
        for words, rule in _STEP_RULES:
            if words in rec.reason:
                return rule
        return "step_approval"
    return _SUBJECT_RULES.get(rec.subject, rec.subject)


def _threshold(state: RunState) -> str:
    limits = state.run_config.get("limits")
    value = limits.get("confidence_threshold") if isinstance(limits, dict) else None
    return f"{value:.2f}" if isinstance(value, int | float) and not isinstance(value, bool) else "the floor"


def _why(rule: str, rec: ApprovalRecord, state: RunState, step: StepView | None, plan: PlanView | None) -> str:
    tool = step.tool if step is not None else None
    if rule == "plan_approval":
        return "every plan version needs a human's yes before it runs (plan approval is on)"
    if rule == "plan_over_budget":
        over = ", ".join(plan.forecast.over) if plan is not None and plan.forecast is not None else "a cap"
        return f"its cost forecast passes what is left of the run's {over} budget"
    if rule == "tool_requires_approval":
        return f"tool {tool} always needs a human's yes"
    if rule == "step_always":
        return "the plan asks for a human's yes before this step"
    if rule == "all_steps":
        return "every step needs a human's yes (approvals: all steps)"
    if rule == "sensitive_tool":
        return f"tool {tool} is sensitive (approvals: sensitive steps)"
    if rule == "low_confidence":
        if rec.subject == "escalation":
            return "the planner's confidence is under the run's floor"
        return f"the planner's confidence in this sensitive step is under {_threshold(state)}"
    if rule == "unapproved_change":
        return f"it changes the world, and plan v{rec.plan_version} that brought it was not approved by a human"
    if rule == "patched_effect":
        how = step.change if step is not None and step.change in ("added", "changed") else "added"
        return (
            f"it changes the world and was {how} by plan v{rec.plan_version}, a patch made after the planner "
            "read the run's results — not part of a plan a human approved"
        )
    if rule == "argument_rule":
        first = rec.violations[0] if rec.violations else None
        if first is not None:
            where = "the call itself" if first.argument == "*" else f"argument {first.argument!r}"
            return f"{where} breaks a rule set on tool {tool}: {first.requires} ({first.reason})"
        return f"an argument breaks a rule set on tool {tool}"
    if rule == "untrusted_effect":
        named = [v.argument for v in rec.violations if v.rule == "untrusted_effect"]
        args = [n for n in named if n != "*"]
        reasons = []
        if "*" in named:
            reasons.append("the planner wrote it after reading untrusted text")
        if args:
            reasons.append(f"{_listed(args)} {'comes' if len(args) == 1 else 'come'} from untrusted text")
        return "it changes the world, and " + (" and ".join(reasons) or "it takes untrusted values")
    if rule == "effect_uncertain":
        return (
            "its call was under way when the process running it stopped: it may or may not have taken effect, "
            "and it is not safe to repeat by itself"
        )
    if rule == "result_failed_checks":
        return "its result failed its acceptance checks, and failed results are reviewed by a human"
    if rule == "answer_checklist":
        return "the final answer is reviewed against a checklist before the run may end with it"
    if rule == "untrusted_answer":
        return rec.reason
    if rule == "planner_question":
        return "the planner needs your answer to go on"
    if rule == "unknown_tool":
        return "the planner chose a tool that does not exist"
    if rule == "planner_gave_up":
        return "the planner says the goal cannot be met as it stands"
    if rule == "budget_cap":
        hit = rec.budget_hit
        if hit is not None:
            return f"the run reached its {hit.budget} cap: {hit.used:g} used of {hit.limit:g}"
        return f"the run reached its {rec.budget} cap"
    return rec.reason


def _listed(names: list[str]) -> str:
    quoted = [repr(n) for n in names]
    word = "argument" if len(names) == 1 else "arguments"
    return f"{word} {', '.join(quoted)}"


def _title(rec: ApprovalRecord, step: StepView | None, plan: PlanView | None) -> str:
    kind = rec.subject
    sid = rec.step_id or "?"
    if kind == "plan":
        patch = plan is not None and plan.changes.base_approved
        return f"Approve plan v{rec.plan_version}" + (" (changes since the last yes)" if patch else "")
    if kind == "step":
        return f"Approve step {sid}: {step.runs_on if step is not None else ''}".rstrip(": ")
    if kind == "effect":
        return f"Did step {sid}'s call take effect?"
    if kind == "question":
        return "The planner asks"
    if kind == "escalation":
        return f"The planner is stuck ({rec.code})"
    if kind == "review":
        return f"Review the result of step {sid}"
    if kind == "answer":
        return "Review the final answer"
    if kind == "budget":
        return f"Raise the {rec.budget} budget?"
    return kind


def _range(pair: tuple[float, float]) -> RangeView:
    return RangeView(low=pair[0], high=pair[1])


def _money(value: float) -> str:
    return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def forecast_view(forecast: Forecast | None, over: tuple[str, ...] = ()) -> ForecastView | None:
    """A recorded forecast as a view (None when there is none)."""
    if forecast is None:
        return None
    low, high = forecast.cost
    cost = _money(low) if low == high else f"{_money(low)}–{_money(high)}"
    if forecast.unpriced:
        cost = "cost unknown" if high == 0 else f"at least {cost}"
    calls = [
        f"{_span(forecast.planner_calls)} planner",
        f"{_span(forecast.executor_calls)} executor",
    ]
    summary = f"{cost} · model calls {', '.join(calls)} · tool calls {_span(forecast.tool_calls)}"
    summary += f" · tokens {_span(forecast.input_tokens)} in, {_span(forecast.output_tokens)} out"
    if forecast.unpriced:
        summary += f" · no price for {', '.join(forecast.unpriced)}"
    if over:
        summary += f" · passes the {', '.join(over)} cap"
    return ForecastView(
        planner_calls=_range(forecast.planner_calls),
        executor_calls=_range(forecast.executor_calls),
        tool_calls=_range(forecast.tool_calls),
        input_tokens=_range(forecast.input_tokens),
        output_tokens=_range(forecast.output_tokens),
        cost=_range(forecast.cost),
        unpriced=list(forecast.unpriced),
        basis=list(forecast.basis),
        over=list(over),
        summary=summary,
    )


def _span(pair: tuple[float, float]) -> str:
    low, high = (int(v) if float(v).is_integer() else v for v in pair)
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def step_view(
    step: Step,
    state: RunState,
    *,
    redactor: Redactor | None,
    sent: Mapping[str, Any] | None = None,
    base: Plan | None = None,
    version: int | None = None,
    current: bool = True,
    labels: Mapping[str, Provenance] | None = None,
) -> StepView:
    """``step`` as a human decides about it: ``sent``, the arguments the engine will send (else
    they are resolved from earlier outputs where they can be); ``base``, the plan its changes are
    shown against; ``current``: the step is the run's record of that id (its status is shown);
    ``labels``: each argument's label (else the record's, once the step started)."""
    rec = state.steps.get(step.id) if current else None
    if rec is not None and rec.step != step:
        rec = None
    change: Literal["added", "changed", "kept"] | None = None
    fields: list[str] = []
    if base is not None:
        before = next((s for s in base.steps if s.id == step.id), None)
        if before is None:
            change = "added"
        else:
            a, b = before.model_dump(mode="json"), step.model_dump(mode="json")
            fields = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            change = "changed" if fields else "kept"
    if sent is None and rec is not None and rec.args is not None:
        sent = rec.args
    if labels is None and rec is not None:
        labels = rec.provenance
    out = rec.output_provenance if rec is not None and rec.done else None
    return StepView(
        id=step.id,
        description=redactor.redact_text(step.description) if redactor is not None else step.description,
        tool=step.tool,
        executor=step.executor,
        runs_on=runs_on(step),
        arguments=arguments(step, sent, state.outputs, redactor, labels),
        depends_on=list(step.depends_on),
        effect=effect_of(step, state.tool_specs),
        plan_version=version if version is not None else (rec.plan_version if rec is not None else None),
        status=rec.status if rec is not None else None,
        change=change,
        changed_fields=fields,
        expected=step.expected,
        allowed_tools=list(step.allowed_tools),
        idempotency_key=rec.idempotency_key if rec is not None else None,
        tainted=rec.tainted if rec is not None else False,
        output_provenance=provenance_view(out, redactor) if out is not None else None,
    )


def _base_of(state: RunState, rec: ApprovalRecord) -> tuple[Plan | None, bool]:
    """The plan a plan question is shown against: the one a human last approved before it was
    asked, or else the version in force before it (not approved)."""
    approved = state.last_approved_plan(before=rec.seq)
    if approved is not None:
        return approved, True
    version = rec.plan_version or 0
    earlier = [p for p in state.plans if p.version < version]
    return (earlier[-1], False) if earlier else (None, False)


def plan_view(
    plan: Plan,
    state: RunState,
    *,
    redactor: Redactor | None,
    base: Plan | None,
    base_approved: bool,
    current: bool = False,
) -> PlanView:
    """A plan version with every step, its changes against ``base`` and its forecast."""
    steps = [
        step_view(s, state, redactor=redactor, base=base, version=plan.version, current=current) for s in plan.steps
    ]
    diff = diff_plans(base, plan) if base is not None else None
    removed = (
        [step_view(s, state, redactor=redactor, version=base.version, current=False) for s in diff.removed]
        if diff is not None and base is not None
        else []
    )
    changed = (
        [
            FieldChangeView(
                step_id=c.step_id, field=f.name, before=_shown(f.before, redactor), after=_shown(f.after, redactor)
            )
            for c in diff.changed
            for f in c.fields
        ]
        if diff is not None
        else []
    )
    added = [s.id for s in plan.steps] if diff is None else [s.id for s in diff.added]
    parts = []
    if diff is not None:
        since = f"since v{base.version}" + (" (approved)" if base_approved else "") if base is not None else ""
        parts = [
            f"{counted(len(diff.added), 'step')} added",
            f"{len(diff.changed)} changed",
            f"{len(diff.removed)} removed",
        ]
        summary = f"{', '.join(parts)} {since}".strip()
    else:
        summary = f"{counted(len(plan.steps), 'step')}, all new"
    return PlanView(
        version=plan.version,
        author=plan.author,
        reason=redactor.redact_text(plan.reason) if redactor is not None else plan.reason,
        steps=steps,
        changes=PlanChangeView(
            base_version=base.version if base is not None else None,
            base_approved=base_approved,
            added=added,
            removed=removed,
            changed=changed,
            kept=list(diff.kept) if diff is not None else [],
            summary=summary,
        ),
        forecast=forecast_view(state.forecasts.get(plan.version), state.over_forecast.get(plan.version, ())),
        world_changing=[s.id for s in steps if s.effect.changes_world],
        as_written=_written(plan, redactor),
    )


def _written(plan: Plan, redactor: Redactor | None) -> dict[str, Any]:
    data: dict[str, Any] = plan.model_dump(mode="json")
    return redactor.redact(data) if redactor is not None else data


def _shown(value: Any, redactor: Redactor | None) -> Any:
    return shown_value(value, redactor)[0]


def _spend(state: RunState) -> SpendView:
    return SpendView(
        model_calls=state.model_calls,
        tool_calls=state.tool_calls,
        steps=state.steps_started,
        input_tokens=state.usage.input_tokens,
        output_tokens=state.usage.output_tokens,
        cost=round(state.cost, 6),
        by_role={role: round(cost, 6) for role, cost in state.cost_by_role.items()},
        by_tool=dict(state.calls_by_tool),
    )


def _budget(rec: ApprovalRecord, state: RunState) -> BudgetView | None:
    if rec.subject != "budget":
        return None
    hit = rec.budget_hit
    version = state.plan.version if state.plan is not None else None
    rest = forecast_view(state.forecasts.get(version)) if version is not None else None
    return BudgetView(
        name=rec.budget or (hit.budget if hit is not None else ""),
        limit=hit.limit if hit is not None else 0.0,
        used=hit.used if hit is not None else 0.0,
        needed=hit.needed if hit is not None else 0.0,
        caps={name: (None if cap is None else float(cap)) for name, cap in state.budget.items()},
        spent=_spend(state),
        rest=rest,
    )


def _answered(rec: ApprovalRecord) -> AnsweredView | None:
    if rec.approved is None:
        return None
    return AnsweredView(
        approved=rec.approved,
        by=rec.by or "human",
        at=rec.decided_at,
        choice=rec.choice,
        reason=rec.decision_reason,
        text=rec.text,
        edited=rec.edited_plan is not None,
        raised={k: (None if v is None else float(v)) for k, v in rec.raised.items()} if rec.raised else None,
    )


def _step_of(state: RunState, rec: ApprovalRecord) -> Step | None:
    if rec.step_id is None:
        return None
    current = state.steps.get(rec.step_id)
    if current is not None and (rec.plan_version is None or current.plan_version == rec.plan_version):
        return current.step
    for old in reversed(state.superseded):
        if old.id == rec.step_id and old.plan_version == rec.plan_version:
            return old.step
    return current.step if current is not None else None


def _step_base(state: RunState, rec: ApprovalRecord) -> Plan | None:
    """For a step question: the plan its change is shown against (the last approved, else the first)."""
    approved = state.last_approved_plan(before=rec.seq)
    if approved is not None:
        return approved
    return state.plans[0] if state.plans and state.plans[0].version != rec.plan_version else None


def question_view(
    state: RunState, rec: ApprovalRecord, *, redactor: Redactor | None = None, run_id: str | None = None
) -> QuestionView:
    """Everything a human needs to answer ``rec``, from the run's state; values are passed through
    ``redactor`` (the store's: a run read back from a store is redacted already)."""
    rule = rule_of(rec)
    step: StepView | None = None
    plan: PlanView | None = None
    found = _step_of(state, rec)
    if found is not None:
        step = step_view(
            found,
            state,
            redactor=redactor,
            sent=rec.args,
            base=_step_base(state, rec) if rec.subject == "step" else None,
            version=rec.plan_version,
            labels=rec.provenance,
        )
    if rec.subject == "plan" and rec.plan is not None:
        base, approved = _base_of(state, rec)
        plan = plan_view(rec.plan, state, redactor=redactor, base=base, base_approved=approved)
    output, size = None, None
    if rec.subject in ("review", "answer"):
        output, size, _cut = shown_value(rec.asked_output, redactor)
    clean = redactor.redact_text if redactor is not None else (lambda text: text)
    checks = (
        [CheckView(name=c.name, passed=c.passed, detail=clean(c.detail)) for c in rec.verdict.failures]
        if rec.verdict is not None
        else []
    )
    return QuestionView(
        run_id=run_id if run_id is not None else state.run_id,
        question_id=rec.approval_id,
        kind=rec.subject,
        title=clean(_title(rec, step, plan)),
        about=clean(about(rec)),
        asked_at=rec.requested_at,
        seq=rec.seq,
        goal=clean(state.goal),
        constraints=[clean(c) for c in state.constraints],
        rule=rule,
        why=clean(_why(rule, rec, state, step, plan)),
        reason=clean(rec.reason),
        code=rec.code,
        step=step,
        plan=plan,
        under_review=output,
        under_review_size=size,
        failed_checks=checks,
        checklist=list(rec.checklist),
        budget=_budget(rec, state),
        answers=answer_options(rec, state, step=step, plan=plan),
        choices=choices_of(rec.subject),
        violations=[violation_view(v, redactor) for v in rec.violations],
        answered=_answered(rec),
    )
