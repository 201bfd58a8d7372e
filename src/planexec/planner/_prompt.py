"""What the planner is told: instructions, the goal, the tools, the budget and the record.

The record shows each step once, with outputs cut to a fixed size, so the planner's input grows
linearly with the steps of the run.

A sealed planner is told nothing a tool or a model wrote: its record names each step by the call
the plan made (the plan's own arguments, never the values bound into them) and says how it went
by its status, its error's kind and the names of the checks it failed — never an output, an error
message or a check's detail; what people told the run is shown, but a final answer's refusal by
the answer checks or the rubric judge only by who refused it (their reasons may quote the answer,
which quotes outputs); tools are shown with what they return (their output schemas), so that the
planner can bind the parts it needs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, get_args

from planexec._util.plural import counted
from planexec.executor import ErrorKind
from planexec.plan import BindingError, Predicate, render_text
from planexec.planner._signatures import returns, signature
from planexec.tools import Tool, Toolset

if TYPE_CHECKING:
    from planexec.log import RunState, StepRecord

_STEP_RULES = """A step runs a tool (args: JSON object text fitting its signature) or, with no tool, a model \
that may call its allowed_tools. In args, "${id}" is step id's output, "${id.key.0}" part of it \
(list id in depends_on).
effect "write": changes things outside the run. approval "always": a human confirms first.
checks: "non_empty", "contains:TEXT", "matches:RE2", "predicate:NAME", "schema:JSON Schema text" \
(as output_schema)."""

UPFRONT = (
    """You plan: executors run your steps (you never call tools); then you answer from their results. \
Steps start when their depends_on finish: list only real ones.
"""
    + _STEP_RULES
    + """
confidence: 0 to 1. Unclear goal: question; impossible: give_up. Reply with JSON only."""
)

STEP_BY_STEP = (
    """You plan for a planner–executor agent, one step a turn: executors run it (you never call tools) \
and you see its result next turn.
"""
    + _STEP_RULES
    + """
Give thought and confidence (0 to 1). Goal met: stop, with the answer. Unclear goal: question; \
impossible: give_up. Reply with JSON only."""
)

STEP_BY_STEP_FLAT = """You plan for a planner–executor agent, one step a turn: executors run it (you never \
call tools) and you see its result next turn.
Reply with one JSON object: {"thought": ..., "next_step": ..., "tool": ..., "arguments": "{...}", \
"stop": false, "confidence": 0 to 1}. next_step says what to do in a sentence; tool names the tool \
(null for work a model must reason through); arguments is a JSON object, as text, fitting its \
signature. Steps are named s1, s2, ... in order: in arguments, "${s1}" is a step's output and \
"${s1.key.0}" a part of it.
Goal met: stop, with the final answer in next_step. Unclear goal: question; impossible: give_up. \
Reply with JSON only."""

PATCH = """Patch the plan: your steps replace every unfinished step. Finished steps stay, with their \
outputs: bind them rather than repeat them. New steps need new ids (keep an id only to run that \
step again unchanged, or to keep a running step running). A running step that writes cannot be \
stopped: it runs on whatever you send, so never repeat its call."""

FINISH = """All steps have finished: give the final answer in answer."""

FINISH_TURN = """You stopped without the final answer: give it now in answer, with stop true."""

SEALED = """You plan: executors run your steps. You never call tools and never see what they return: you plan \
the whole job now, from the goal and the tools' signatures. Steps start when their depends_on finish: list \
only real ones.
A step runs a tool (args: JSON object text fitting its signature) or, with no tool, a model that calls no \
tools. In args, "${id}" is step id's output, "${id.key.0}" part of it, as its tool's returns say (list id in \
depends_on): values reach later steps only so.
effect "write": changes things outside the run. approval "always": a human confirms first.
checks: "non_empty", "contains:TEXT", "matches:RE2", "predicate:NAME", "schema:JSON Schema text" \
(as output_schema).
answer: the final answer, written now as a template the run fills in once every step has finished: \
"{{id}}" is step id's output, "{{id.key.0}}" part of it. No answer: the last step's output is the answer.
Nothing you plan can depend on what a step returns: no branching on results.
confidence: 0 to 1. Unclear goal: question; impossible: give_up. Reply with JSON only."""
"""A sealed planner's instructions (the extractor's sentence follows: :func:`sealed_instructions`)."""

_EXTRACTOR = """Extractor: to use a value inside an output (an IBAN in a fetched bill, a date in an e-mail), \
add a step with executor "{name}", no tool, args binding the text to read, and output_schema the JSON \
Schema of the values it pulls out; later steps bind its fields ("${{id.iban}}")."""

_NO_EXTRACTOR = """No extractor is configured: an output can be passed on whole, or by a path its tool's \
returns give, but nothing can pull a value out of text."""


def sealed_instructions(extractor: str | None) -> str:
    """A sealed planner's instructions, with the extractor executor it may route steps to (None: none)."""
    return SEALED + "\n" + (_EXTRACTOR.format(name=extractor) if extractor else _NO_EXTRACTOR)


PATCH_SEALED = """Patch the plan: your steps replace every unfinished step. Finished steps stay, with their \
outputs (never shown to you): bind them rather than repeat them. New steps need new ids (keep an id only to \
run that step again unchanged, or to keep a running step running). A running step that writes cannot be \
stopped: it runs on whatever you send, so never repeat its call. The answer template is kept unless you give \
answer again: give it again when a step it names is gone."""

_SEALED_WHY = {
    "failure": "steps failed (the record says which, and how)",
    "after_step": "a step finished",
    "information": "people told the run something new (below)",
    "review": "the final answer was refused (below)",
}


def sealed_why(state: RunState) -> str:
    """Why a sealed planner is asked for a patch: the kind of the round, in words of planexec's own."""
    planning = state.planning
    trigger = planning.trigger if planning is not None else "failure"
    return _SEALED_WHY.get(trigger, "the plan is to be patched")


RECORD_HEAD = "Record:"
"""The first line of the record (what tools that read a planner's prompt look for)."""


HANDOFF = """Workflows: deterministic scripts that finish the work. To hand the rest of the work to one, \
give handoff {"workflow": NAME, "args": JSON object text fitting its signature; may bind "${id}"} \
(step by step: a step calling it). It runs after all your steps; its output is the final answer."""


def describe_tools(
    tools: Toolset, executors: Mapping[str, str], workflows: Collection[str] = (), *, outputs: bool = False
) -> str:
    """The tools, the workflows and the executors as the planner reads them: made once for each
    toolset (an immutable value), executors and workflows, and then kept while it is among the
    last few described. ``workflows``: the names of the tools that are workflows. ``outputs``:
    show what each tool returns (its output schema), for a planner that binds outputs unseen."""
    docs = (*executors.items(), *(("", name) for name in sorted(workflows)))
    known = _TOOLSETS.get((id(tools), outputs))
    if known is not None and known[0] is tools and known[1] == docs:
        return known[2]
    describe = _describe_with_output if outputs else _describe_tool
    lines = ["Tools:", *(describe(t) for t in tools if t.name not in workflows)]
    if executors:
        lines.append("Executors, for steps with no tool:")
        lines += [f"- {name}: {desc}" for name, desc in executors.items()]
    if workflows:
        lines.append(HANDOFF)
        lines += [describe(t) for t in tools if t.name in workflows]
    text = "\n".join(lines)
    if len(_TOOLSETS) >= _TOOLSETS_MAX:
        _TOOLSETS.pop(next(iter(_TOOLSETS)))
    _TOOLSETS[(id(tools), outputs)] = (tools, docs, text)  # the toolset is kept: its id is its own while here
    return text


_TOOLSETS: dict[tuple[int, bool], tuple[Toolset, tuple[tuple[str, str], ...], str]] = {}
"""Described toolsets by id: the toolset, its executors' texts and workflows' names, the text."""
_TOOLSETS_MAX = 64

_TOOL_TEXTS: dict[tuple[str, str, bool, bool, str], str] = {}
"""Tools' texts by what they are made from: tools made anew with the same name, description,
flags and schema (an agent built per task, an MCP server listed again) are not written again."""
_TOOL_TEXTS_MAX = 4096


def _describe_tool(tool: Tool) -> str:
    """One tool as the planner reads it (a tool is an immutable value: this is made once per tool,
    and once for tools made alike)."""
    text: str | None = getattr(tool, "_planner_text", None)
    if text is None:
        # A tool's schema is JSON data (checked when the tool is made), which its repr names
        # exactly: key order, lists and tuples, 1, 1.0 and true all told apart.
        key = (tool.name, tool.description, tool.side_effect, tool.sensitive, repr(tool.parameters))
        text = _TOOL_TEXTS.get(key)
        if text is None:
            text = _tool_text(tool)
            if len(_TOOL_TEXTS) >= _TOOL_TEXTS_MAX:
                _TOOL_TEXTS.clear()
            _TOOL_TEXTS[key] = text
        object.__setattr__(tool, "_planner_text", text)
    return text


def _describe_with_output(tool: Tool) -> str:
    """A tool as a sealed planner reads it: its signature, then what it returns."""
    text: str | None = getattr(tool, "_planner_text_outputs", None)
    if text is None:
        text = _describe_tool(tool)
        if tool.output_schema is not None:
            kind, notes = returns(tool.output_schema)
            text += "\n" + "\n".join([f"  returns: {kind}", *(f"  {n}" for n in notes)])
        object.__setattr__(tool, "_planner_text_outputs", text)
    return text


def _tool_text(tool: Tool) -> str:
    flags = [f for f, on in (("writes", tool.side_effect), ("sensitive", tool.sensitive)) if on]
    suffix = f" [{', '.join(flags)}]" if flags else ""
    head, notes = signature(tool.name, tool.parameters)
    return "\n".join([f"- {head}{suffix}: {' '.join(tool.description.split())}", *(f"  {n}" for n in notes)])


def describe_goal(goal: str, constraints: tuple[str, ...]) -> str:
    text = f"Goal: {goal}"
    if constraints:
        text += "\nConstraints:\n" + "\n".join(f"- {c}" for c in constraints)
    return text


def describe_heard(state: RunState, *, sealed: bool = False, answer_checks: Collection[str] = ()) -> str | None:
    """What people told the run: new information and constraints, answers to the planner's
    questions, guidance given on escalations, and final answers a review refused.

    ``sealed``: a refusal by the answer checks (code) or the rubric judge (a model that read the
    answer) is shown by who refused it, and by the names of the checks among ``answer_checks``
    that refused, never by their reasons: those may quote the answer, and so the outputs."""
    lines: list[str] = []
    for info in state.information:
        label = "New constraint" if info.constraint else "New information"
        lines.append(f"- {label} from {info.by}: {info.text}")
    for rec in state.approvals.values():
        if rec.subject == "question" and rec.text is not None:
            lines.append(f"- You asked the user: {rec.reason}\n  The user answered: {rec.text}")
        elif rec.subject == "escalation" and rec.approved and rec.text:
            lines.append(f"- Guidance from {rec.by or 'a human'} ({rec.code or 'escalation'}): {rec.text}")
    for review in state.reviews:
        if not review.passed:
            why = "; ".join(review.problems) or "no reason given"
            if sealed and review.reviewer != "human":
                why = _sealed_refusal(review.reviewer, review.problems, answer_checks)
            lines.append(f"- A final answer was refused by the {review.reviewer} review: {why}")
    if not lines:
        return None
    return "What people told this run (it overrides earlier assumptions):\n" + "\n".join(lines)


def describe_budget(left: Mapping[str, Any]) -> str:
    if not left:
        return "Budget left: no caps."
    return "Budget left: " + ", ".join(f"{k} {v}" for k, v in left.items())


def _sealed_refusal(reviewer: str, problems: Collection[str], names: Collection[str]) -> str:
    """A refusal as a sealed planner reads it: the refusing checks' names (among ``names``), no reasons."""
    refused = dict.fromkeys(n for p in problems if (n := p.partition(": ")[0]) in names)
    said = f"refused by {', '.join(refused)}" if reviewer == "checks" and refused else "refused"
    return f"{said} (reasons not shown: they may quote the answer's outputs)"


def _cut(value: Any, limit: int) -> str:
    try:
        text = render_text(value)
    except BindingError as e:
        return f"(cannot be shown as text: {e})"
    return text if len(text) <= limit else text[:limit] + f"… ({counted(len(text) - limit, 'more character')})"


def describe_record(state: RunState, limit: int, window: int | None = None) -> str:
    """What has happened, as an append-only record: each finished step (and each failed try of a
    step run again) in the order it finished, with its output or error cut to ``limit``
    characters; then the steps not finished yet. A later record starts with an earlier one, so a
    provider's prompt cache serves it.

    ``window``: show at most this many finished steps in full; older ones are folded, a half
    window at a time, into one line of ids by status (their outputs can still be bound)."""
    done = [r for r in (*state.superseded, *state.steps.values()) if r.done and r.finished_at is not None]
    done.sort(key=lambda r: r.finished_at or 0.0)
    lines = [RECORD_HEAD]
    if window is not None and len(done) > window:
        chunk = max(1, window // 2)
        folded = -(-(len(done) - window) // chunk) * chunk
        lines.append(_folded(done[:folded]))
        done = done[folded:]
    lines += (_entry(r, limit) for r in done)
    waiting = [r for r in state.steps.values() if not r.done]
    if waiting:
        lines.append("Not finished:")
        for r in waiting:
            after = f" (after {', '.join(r.step.depends_on)})" if r.step.depends_on and r.status == "pending" else ""
            lines.append(f"{_what(r)} {r.status}{after}")
    if len(lines) == 1:
        lines.append("- nothing has run yet")
    return "\n".join(lines)


def _doer(rec: StepRecord) -> str:
    s = rec.step
    return s.tool if s.tool else f"executor {s.executor}" if s.executor else "model"


def _what(rec: StepRecord) -> str:
    """A step as the record names it: a tool step by its call, a model step by its task."""
    s = rec.step
    if s.tool is not None:
        return f"- {rec.id} {s.tool} {_cut(rec.args if rec.args is not None else s.args, _CALL_CHARS)}"
    return f"- {rec.id} {_doer(rec)}: {s.description}"


def _entry(rec: StepRecord, limit: int) -> str:
    """One finished step: a tool step by its call, a model step by its task; then what came of it."""
    s = rec.step
    head = _what(rec)
    if rec.status == "succeeded":
        return head + f" → {_cut(rec.output, limit)}"
    if rec.status == "cancelled":
        return head + " ✗ cancelled" + (f": {rec.cancel_reason}" if rec.cancel_reason else "")
    head += " ✗ failed" + (f": {_cut(str(rec.error), limit)}" if rec.error is not None else "")
    if s.tool is None and rec.args is not None:
        head += f"\n  args: {_cut(rec.args, limit)}"
    if rec.verdict is not None and rec.verdict.failures:
        head += "\n  failed checks: " + "; ".join(f"{c.name}: {c.detail}" for c in rec.verdict.failures)
    return head


_CALL_CHARS = 200
"""How much of a tool step's arguments its record entry shows."""


def _folded(records: list[StepRecord]) -> str:
    by_status: dict[str, list[str]] = {}
    for r in records:
        by_status.setdefault(r.status, []).append(r.id)
    groups = "; ".join(f"{status} {_ranges(ids)}" for status, ids in by_status.items())
    return f"- earlier steps, outputs not shown (bind them with ${{id}}): {groups}"


def _ranges(ids: list[str]) -> str:
    """``s1, s2, s3, s7, x`` → ``s1–s3, s7, x``: runs of one prefix with consecutive numbers."""
    out: list[str] = []
    run: list[tuple[str, int, str]] = []

    def flush() -> None:
        if len(run) > 2:
            out.append(f"{run[0][2]}–{run[-1][2]}")
        else:
            out.extend(r[2] for r in run)
        run.clear()

    for sid in ids:
        stem = sid.rstrip("0123456789")
        digits = sid[len(stem) :]
        if digits and not (digits.startswith("0") and len(digits) > 1):
            n = int(digits)
            if run and run[-1][0] == stem and run[-1][1] == n - 1:
                run.append((stem, n, sid))
                continue
            flush()
            run.append((stem, n, sid))
            continue
        flush()
        out.append(sid)
    flush()
    return ", ".join(out)


# -- the sealed record ----------------------------------------------------------------------------

_KINDS = frozenset(get_args(ErrorKind))
_CHECK_NAMES = frozenset(
    {"output_schema", "schema", "non_empty", "contains", "matches", "accept", "confidence", "rubric"}
)
"""The names of the acceptance checks planexec runs (a predicate's is ``predicate:NAME``)."""


def describe_sealed_record(state: RunState) -> str:
    """The record as a sealed planner reads it: each finished step (and each failed try of a step
    run again) in the order it finished, named by the call its plan made — the plan's arguments,
    bindings unresolved — with its status, its error's kind and the names of the checks it failed;
    then the steps not finished yet. Nothing a tool or a model wrote is in it."""
    done = [r for r in (*state.superseded, *state.steps.values()) if r.done and r.finished_at is not None]
    done.sort(key=lambda r: r.finished_at or 0.0)
    lines = [RECORD_HEAD, "(outputs are never shown: bind them with ${id})"]
    lines += (_sealed_entry(r) for r in done)
    waiting = [r for r in state.steps.values() if not r.done]
    if waiting:
        lines.append("Not finished:")
        for r in waiting:
            after = f" (after {', '.join(r.step.depends_on)})" if r.step.depends_on and r.status == "pending" else ""
            lines.append(f"{_planned(r)} {r.status}{after}")
    if len(lines) == 2:
        lines.append("- nothing has run yet")
    return "\n".join(lines)


def _planned(rec: StepRecord) -> str:
    """A step as its plan wrote it: a tool step by its tool and the plan's arguments, a model step by its task."""
    s = rec.step
    if s.tool is not None:
        return f"- {rec.id} {s.tool} {_cut(s.args, _CALL_CHARS)}"
    return f"- {rec.id} {_doer(rec)}: {s.description}"


def _sealed_entry(rec: StepRecord) -> str:
    head = _planned(rec)
    if rec.status == "succeeded":
        return head + " → succeeded"
    if rec.status in ("cancelled", "dropped"):
        return head + f" ✗ {rec.status}"
    kind = rec.error.kind if rec.error is not None and rec.error.kind in _KINDS else "error"
    head += f" ✗ failed: {kind}"
    if rec.verdict is not None and rec.verdict.failures:
        own = {f"predicate:{c.name}" for c in rec.step.checks if isinstance(c, Predicate)}
        known = _CHECK_NAMES | own
        names = dict.fromkeys(c.name if c.name in known else "a check" for c in rec.verdict.failures)
        head += "\n  failed checks: " + ", ".join(names)
    return head
