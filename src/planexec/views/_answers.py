"""What each answer to a question does, in words, for every kind of question."""

from __future__ import annotations

from collections.abc import Callable

from planexec._util.plural import counted
from planexec.log import ApprovalRecord, RunState
from planexec.views._models import AnswerOption, PlanView, StepView

__all__ = ["answer_options", "choices_of"]

_CHOICES = {"effect": ["retry", "skip", "done"], "escalation": ["guidance", "replan"]}


def choices_of(kind: str) -> list[str]:
    """The ``choice`` values an approval of this kind of question takes."""
    return list(_CHOICES.get(kind, []))


def _rounds_left(state: RunState) -> str:
    config = state.run_config
    review = config.get("review") if isinstance(config.get("review"), dict) else None
    rounds = review.get("max_rounds") if review is not None else None
    done = sum(1 for r in state.reviews if not r.passed)
    if isinstance(rounds, int) and not isinstance(rounds, bool):
        left = max(0, rounds - done - 1)
        if left == 0:
            return "; this was the last round allowed, so the run then stops escalated (answer_rejected)"
        return f"; {counted(left, 'more refusal')} allowed before the run stops escalated"
    return ""


def answer_options(
    rec: ApprovalRecord, state: RunState, *, step: StepView | None, plan: PlanView | None
) -> list[AnswerOption]:
    """Every way to answer ``rec`` and what the run does then."""
    options = _OPTIONS.get(rec.subject)
    return options(rec, state, step, plan) if options is not None else _approve_or_reject()


def _approve_or_reject() -> list[AnswerOption]:
    """A question of no kind known here: yes goes on, no stops."""
    return [
        AnswerOption(decision="approve", label="Approve", does="the run goes on"),
        AnswerOption(decision="reject", label="Reject", does="the run stops as rejected", needs=["reason"]),
    ]


def _plan_options(
    rec: ApprovalRecord, state: RunState, step: StepView | None, plan: PlanView | None
) -> list[AnswerOption]:
    if plan is None:
        return _approve_or_reject()
    writes = plan.world_changing
    runs = f"plan v{plan.version} is put in force: {counted(len(plan.steps), 'step')} run as shown"
    if writes:
        verb = "changes" if len(writes) == 1 else "change"
        runs += f" ({counted(len(writes), 'step')} that {verb} the world: {', '.join(writes)})"
    return [
        AnswerOption(decision="approve", label="Approve", does=runs),
        AnswerOption(
            decision="approve",
            label="Approve an edited plan",
            does="your edit is checked like any plan (tools, arguments, bindings) and runs instead, as a "
            "version a human made",
            needs=["plan"],
        ),
        AnswerOption(
            decision="reject",
            label="Reject",
            does="nothing of this plan runs; the run stops as rejected",
            needs=["reason"],
        ),
    ]


def _step_options(
    rec: ApprovalRecord, state: RunState, step: StepView | None, plan: PlanView | None
) -> list[AnswerOption]:
    sid = rec.step_id or "?"
    call = f"calls tool {step.tool}" if step is not None and step.tool else "runs its model-driven task"
    return [
        AnswerOption(decision="approve", label="Approve", does=f"step {sid} {call} with the arguments shown, once"),
        AnswerOption(
            decision="reject",
            label="Reject",
            does=f"step {sid} is not run; the run stops as rejected",
            needs=["reason"],
        ),
    ]


def _effect_options(
    rec: ApprovalRecord, state: RunState, step: StepView | None, plan: PlanView | None
) -> list[AnswerOption]:
    sid = rec.step_id or "?"
    tool = step.tool if step is not None and step.tool else "its tool"
    key = f" ({step.idempotency_key})" if step is not None and step.idempotency_key else ""
    return [
        AnswerOption(
            decision="approve",
            choice="retry",
            label="Call again",
            does=f"{tool} is called again with the same idempotency key{key}: choose it when the call did not "
            "happen, or when the tool ignores a key it has seen",
        ),
        AnswerOption(
            decision="approve",
            choice="skip",
            label="Skip",
            does=f"step {sid} fails without a call; the planner patches the rest of the plan",
        ),
        AnswerOption(
            decision="approve",
            choice="done",
            label="Mark done",
            does=f"step {sid} counts as succeeded with the output you give (the call is not made again)",
            needs=["output"],
        ),
        AnswerOption(
            decision="reject",
            label="Reject",
            does=f"step {sid} fails without a call, as with skip",
            needs=["reason"],
        ),
    ]


def _question_options(
    rec: ApprovalRecord, state: RunState, step: StepView | None, plan: PlanView | None
) -> list[AnswerOption]:
    return [
        AnswerOption(
            decision="answer",
            label="Answer",
            does="the planner goes on with your answer (it becomes part of what it is told)",
            needs=["text"],
        )
    ]


def _escalation_options(
    rec: ApprovalRecord, state: RunState, step: StepView | None, plan: PlanView | None
) -> list[AnswerOption]:
    return [
        AnswerOption(
            decision="approve",
            choice="guidance",
            label="Give guidance",
            does="the planner plans again with your guidance",
            needs=["text"],
        ),
        AnswerOption(
            decision="approve",
            choice="replan",
            label="Let it try again",
            does="the planner is asked again as it is",
        ),
        AnswerOption(decision="reject", label="Stop the run", does="the run stops as escalated", needs=["reason"]),
    ]


def _review_options(
    rec: ApprovalRecord, state: RunState, step: StepView | None, plan: PlanView | None
) -> list[AnswerOption]:
    sid = rec.step_id or "?"
    return [
        AnswerOption(
            decision="approve",
            label="Accept",
            does=f"the result is accepted: step {sid} succeeds and later steps use it",
        ),
        AnswerOption(
            decision="reject",
            label="Refuse",
            does=f"step {sid} fails its checks; the planner patches the rest of the plan",
            needs=["reason"],
        ),
    ]


def _answer_options(
    rec: ApprovalRecord, state: RunState, step: StepView | None, plan: PlanView | None
) -> list[AnswerOption]:
    if rec.rule == "untrusted_answer":
        return [
            AnswerOption(
                decision="approve",
                label="Approve",
                does="the run ends, goal met, with this answer as shown; its label says you confirmed it",
            ),
            AnswerOption(
                decision="reject",
                label="Withhold",
                does="the run ends, goal met, with the answer's untrusted parts left out (the whole answer when "
                "the planner wrote it after reading untrusted text); the run's log keeps what was left out",
            ),
        ]
    return [
        AnswerOption(
            decision="approve",
            label="Approve",
            does="every item of the checklist is ticked and the run ends, goal met, with this answer",
            needs=["checklist"],
        ),
        AnswerOption(
            decision="reject",
            label="Refuse",
            does="the answer goes back to the planner with your reason and the items you failed" + _rounds_left(state),
            needs=["reason", "checklist"],
        ),
    ]


def _budget_options(
    rec: ApprovalRecord, state: RunState, step: StepView | None, plan: PlanView | None
) -> list[AnswerOption]:
    name = rec.budget or "the"
    return [
        AnswerOption(
            decision="approve",
            label="Raise and go on",
            does="the caps you give replace the run's (a higher one for the cap reached at least) and the run "
            "goes on where it stopped; what it spent stays counted",
            needs=["budget"],
        ),
        AnswerOption(
            decision="reject",
            label="Stop",
            does=f"the run stops: budget exhausted ({name})",
            needs=["reason"],
        ),
    ]


_Options = Callable[[ApprovalRecord, RunState, StepView | None, PlanView | None], list[AnswerOption]]

_OPTIONS: dict[str, _Options] = {
    "plan": _plan_options,
    "step": _step_options,
    "effect": _effect_options,
    "question": _question_options,
    "escalation": _escalation_options,
    "review": _review_options,
    "answer": _answer_options,
    "budget": _budget_options,
}
"""The answers of each kind of question (its ``subject``)."""
